"""steptrace show RUN_DIR: a run's state and headline summary rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .common import BadInput, add_json, print_json

# The summary rows printed as text, in this order; --json gives every row.
HEADLINE = [("requests", "finished"), ("requests", "rejected"), ("throughput", "requests"),
            ("throughput", "output_tokens"), ("ttft", "p50"), ("ttft", "p99"),
            ("tpot", "p50"), ("tpot", "p99"), ("itl", "p99"), ("e2e", "p50"),
            ("sched_call", "p50"), ("sched_call", "p99"), ("sched_cpp", "p50"),
            ("step", "p50"), ("harness", "per_step"), ("achieved", "tflops_per_device"),
            ("mfu", "model")]


def add(sub) -> None:
    p = sub.add_parser("show", help="print a run's summary table")
    p.add_argument("run_dir", type=Path)
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    result = read(args.run_dir)
    if args.json:
        print_json(result)
    else:
        print_text(result)
    return 0


def read(run_dir: Path) -> dict:
    """The run's manifest essentials and every summary row (metric, stat, value, unit)."""
    try:
        manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
        summary = _read(Path(run_dir), "summary")
    except (OSError, ValueError) as e:
        raise BadInput(f"{run_dir}: not a run directory ({e})") from None
    return dict(run_dir=str(run_dir), complete=bool(manifest.get("complete")),
                device=manifest["device"]["name"], modeled=bool(manifest.get("modeled")),
                gil_mode=manifest["gil_mode"],
                summary=summary[["metric", "stat", "value", "unit"]].to_dict("records"))


def print_text(result: dict) -> None:
    state = "complete" if result["complete"] else "INCOMPLETE"
    modeled = " (modeled)" if result["modeled"] else ""
    print(f"{result['run_dir']}  [{state}]  device {result['device']}{modeled}, "
          f"gil {result['gil_mode']}")
    rows = {(r["metric"], r["stat"]): r for r in result["summary"]}
    # the device table's utilisation and power means, and energy per token, side by side
    telemetry = [k for k, r in rows.items() if (k[1] == "mean" and r["unit"] in ("%", "W"))
                 or k[0] == "energy_per_output_token"]
    for key in HEADLINE + telemetry:
        if key in rows:
            r = rows[key]
            print(f"  {key[0] + ' ' + key[1]:28}{r['value']:>14.4g} {r['unit']}")


def _read(run_dir: Path, name: str) -> pd.DataFrame:
    for fmt, reader in (("parquet", pd.read_parquet), ("csv", pd.read_csv)):
        path = run_dir / f"{name}.{fmt}"
        if path.exists():
            return reader(path)
    raise ValueError(f"no {name} table")
