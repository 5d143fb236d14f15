"""A device run's checks, from `steptrace run --json`'s document: every run completed on a
torch device (not modeled), and its device table holds rows of the telemetry source asked
for (nvml on CUDA) with readings in them.

    python tests/device/check_run.py RUN.json [--source nvml]
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from harness.record.table_reader import table_file

READINGS = ("util_pct", "power_w", "mem_used_bytes")  # what every GPU source reports


def problems(run: dict, source: str) -> list:
    where = run["run_dir"]
    if not run["complete"] or run["modeled"]:
        return [f"{where}: state {run['state']}, modeled {run['modeled']}; expected a "
                f"complete torch run"]
    path = table_file(Path(where), "device")
    if path is None:
        return [f"{where}: no device table (telemetry off?)"]
    table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    rows = table[table["source"] == source]
    read = {c: int(rows[c].notna().sum()) for c in READINGS}
    print(f"{where} on {run['device']}: {len(rows)} {source} rows of {len(table)}; readings "
          + ", ".join(f"{c} {n}" for c, n in read.items())
          + "".join(f"; mean {c} {rows[c].mean():.4g}" for c in ("util_pct", "power_w")
                    if read.get(c)))
    if rows.empty:
        return [f"{path}: no {source} rows"]
    return [f"{path}: no {source} row reads {c}" for c, n in read.items() if n == 0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_json", type=Path, help="`steptrace run --json`'s output")
    p.add_argument("--source", default="nvml", help="the telemetry source (default nvml)")
    args = p.parse_args(argv)
    doc = json.loads(args.run_json.read_text())
    runs = doc.get("runs")  # a failed command's document: error, message, exit_code
    found = [line for run in runs for line in problems(run, args.source)] if runs \
        else [f"{args.run_json}: no runs ({doc.get('message', 'none planned')})"]
    for line in found:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
