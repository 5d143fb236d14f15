"""steptrace show RUN_DIR: a run's state and headline summary rows."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pandas as pd

from engine.files import check_regular

from ..metrics import STATUSES
from .common import BadInput, add_json, print_json

# The summary rows printed as text, in this order; --json gives every row.
HEADLINE = [("steps", "recorded"), ("requests", "finished"), ("requests", "rejected"),
            ("throughput", "requests"), ("throughput", "output_tokens"), ("goodput", "requests"),
            ("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("itl", "p99"),
            ("e2e", "p50"),
            ("sched_call", "p50"), ("sched_call", "p99"), ("sched_cpp", "p50"),
            ("step", "p50"), ("harness", "per_step"), ("achieved", "tflops_per_device"),
            ("mfu", "model")]
COUNT_UNITS = ("requests", "steps", "samples", "tokens", "blocks")


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
    """The run's state, manifest essentials and every summary row (metric, stat, value,
    unit). A run without a summary (killed, failed, or still running) gets the engine
    summary of the steps it holds."""
    run_dir = Path(run_dir)
    try:  # a FIFO in its place would block the reader for ever
        text = check_regular(run_dir / "manifest.json").read_text()
    except (OSError, ValueError) as e:
        raise BadInput(f"{run_dir}: not a run directory ({e})") from None
    manifest, device, gil_mode = _manifest(run_dir, text)
    device = manifest.get("modeled_device") or device  # a modeled run: the device it models
    state = _state(manifest)
    try:
        summary = _read(run_dir, "summary")
    except (OSError, ValueError) as e:
        if state in ("complete", "interrupted"):
            raise BadInput(f"{run_dir}: the run ended but its summary is unreadable ({e})") \
                from None
        summary = _steps_summary(run_dir)
    missing = [c for c in ("metric", "stat", "value", "unit") if c not in summary.columns]
    if missing or (len(summary) and not pd.api.types.is_numeric_dtype(summary["value"])):
        what = f"no column(s) {', '.join(missing)}" if missing else "values that are not numbers"
        raise BadInput(f"{run_dir}: the summary table is not a run's summary ({what})")
    rows = summary[["metric", "stat", "value", "unit"]].to_dict("records")
    failed = [f"the run failed: {manifest['error']}"] if state == "failed" else []
    return dict(run_dir=str(run_dir), state=state, complete=state == "complete",
                device=device, modeled=bool(manifest.get("modeled")), gil_mode=gil_mode,
                error=manifest.get("error") if state == "failed" else None,
                summary=rows, notes=failed + _notes(rows, run_dir))


def _manifest(run_dir: Path, text: str):
    """(manifest, device name, gil mode); BadInput for anything but a run's manifest."""
    try:
        manifest = json.loads(text)
        if not isinstance(manifest, dict):
            raise TypeError(f"a JSON {type(manifest).__name__}, not an object")
        device, gil_mode = manifest["device"]["name"], manifest["gil_mode"]
        if not isinstance(device, str) or not isinstance(gil_mode, str):
            raise TypeError(f"device.name and gil_mode are not text: {device!r}, {gil_mode!r}")
        if not isinstance(manifest.get("values", {}), dict):
            raise TypeError(f"values is not a mapping: {str(manifest['values'])[:60]!r}")
    except RecursionError:
        raise BadInput(f"{run_dir / 'manifest.json'}: JSON nested too deeply") from None
    except ValueError as e:
        raise BadInput(f"{run_dir / 'manifest.json'}: not valid JSON ({e})") from None
    except (KeyError, TypeError) as e:
        what = f"no key {e}" if isinstance(e, KeyError) else str(e)
        raise BadInput(f"{run_dir / 'manifest.json'}: not a run's manifest ({what})") from None
    return manifest, device, gil_mode


def _notes(rows, run_dir: Path) -> list:
    """Why every statistic is NaN (it is valid, and silent): every step or request was
    warm-up, every request was rejected, or none finished."""
    value = {(r["metric"], r["stat"]): r["value"] for r in rows}.get
    warm = value(("requests", "warmup")) or 0
    count = {s: value(("requests", s)) or 0 for s in STATUSES}
    measured = sum(count.values())
    if warm and value(("step", "count"), -1) == 0:
        return [f"every step was a warm-up step (warmup_steps is not below the run's steps): "
                f"no step and none of the {warm:.0f} requests was measured, so every "
                f"statistic is NaN; lower warmup_steps"]
    if warm and not measured:
        return [f"all {warm:.0f} requests were first scheduled in warm-up steps: none was "
                f"measured, so every latency and throughput statistic is NaN; lower "
                f"warmup_steps"]
    if measured and count["rejected"] == measured:
        return [f"every request ({measured:,.0f}) was rejected, so every latency and "
                f"throughput statistic is NaN{_first_reason(run_dir)}"]
    if measured and not count["finished"] and not count["handed_off"]:
        return [f"no request finished ({count['unfinished']:,.0f} unfinished, "
                f"{count['rejected']:,.0f} rejected), so every latency statistic is NaN"]
    return []


def _first_reason(run_dir: Path) -> str:
    """': <the first rejected request's reason>', from the requests table if it reads."""
    try:
        requests = _read(run_dir, "requests")
        reasons = requests.loc[requests["status"] == "rejected", "reason"]
    except (OSError, ValueError, KeyError):
        return ""
    return f"; the first: {reasons.iloc[0]}" if len(reasons) and reasons.iloc[0] else ""


def _state(manifest: dict) -> str:
    """complete, failed (a table could not be written), interrupted (Ctrl-C or SIGTERM:
    the tables whole), killed (the process ended without closing the run) or running."""
    if manifest.get("complete"):
        return "complete"
    if "error" in manifest:
        return "failed"
    if "ended" in manifest:
        return "interrupted"
    if "killed" in manifest or not _alive(manifest.get("pid"), manifest.get("host")):
        return "killed"
    return "running"


def _alive(pid, host) -> bool:
    if type(pid) is not int or not 0 < pid < 2 ** 31 or host != socket.gethostname():
        return True  # cannot tell: say running, not killed (0 and -1 would name groups)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the number
        return True
    return True


def _steps_summary(run_dir: Path) -> pd.DataFrame:
    """What the steps table of an unfinished run says: its step count and the engine
    summary (no MFU: the device's peak is the run's to know)."""
    from harness.metrics import SUMMARY_COLUMNS
    from harness.step_summary import engine_summary

    try:
        steps = _read(run_dir, "steps")
    except (OSError, ValueError):
        return pd.DataFrame([], columns=list(SUMMARY_COLUMNS))
    recorded = pd.DataFrame([("steps", "recorded", float(steps["step"].nunique()), "steps")],
                            columns=list(SUMMARY_COLUMNS))
    return pd.concat([recorded, engine_summary(steps, None)], ignore_index=True)


def print_text(result: dict) -> None:
    state = result["state"] if result["complete"] else result["state"].upper()
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
            print(f"  {key[0] + ' ' + key[1]:28}{_number(r):>14} {r['unit']}")
    for note in result.get("notes", ()):
        print(f"  note: {note}")


def _number(row: dict) -> str:
    """A count as an integer (19,370 requests, not 1.937e+04); anything else to 4 digits."""
    value = row["value"]
    count = row["unit"] in COUNT_UNITS or row["stat"] == "count"
    return f"{value:,.0f}" if count and float(value).is_integer() else f"{value:.4g}"


def _read(run_dir: Path, name: str) -> pd.DataFrame:
    for fmt, reader in (("parquet", pd.read_parquet), ("csv", pd.read_csv)):
        path = run_dir / f"{name}.{fmt}"
        if path.exists():
            return reader(path)
    raise ValueError(f"no {name} table")
