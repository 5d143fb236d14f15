"""steptrace run | validate | show."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from .workload import WorkloadError, load_workload


def main(args) -> int:
    if args.command == "show":
        return show(args.run_dir)
    try:
        workload = load_workload(args.workload, tuple(args.set))
        if args.command == "validate":
            print(f"{args.workload}: valid ({workload.name}: {workload.clock} clock, "
                  f"device {workload.values['device']}, gil {workload.values['gil']})")
            return 0
        from .run import run_workload  # torch is imported only for a real run
        from .workload_trace import TraceLoadError
    except WorkloadError as e:
        print(f"steptrace: error: {e}", file=sys.stderr)
        return 2
    try:
        runs = run_workload(workload, _progress())
    except (WorkloadError, TraceLoadError) as e:
        print(f"steptrace: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the run failed: report it, with what was recorded on disk
        print(f"steptrace: run failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    for run_dir in runs:
        show(run_dir)
    return 0


def show(run_dir: Path) -> int:
    try:
        manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
        summary = _read(Path(run_dir), "summary")
    except (OSError, ValueError) as e:
        print(f"steptrace: error: {run_dir}: not a run directory ({e})", file=sys.stderr)
        return 2
    state = "complete" if manifest.get("complete") else "INCOMPLETE"
    modeled = " (modeled)" if manifest.get("modeled") else ""
    print(f"{run_dir}  [{state}]  device {manifest['device']['name']}{modeled}, "
          f"gil {manifest['gil_mode']}")
    wanted = [("requests", "finished"), ("requests", "rejected"), ("throughput", "requests"),
              ("throughput", "output_tokens"), ("ttft", "p50"), ("ttft", "p99"),
              ("tpot", "p50"), ("tpot", "p99"), ("itl", "p99"), ("e2e", "p50"),
              ("sched_call", "p50"), ("sched_call", "p99"), ("sched_cpp", "p50"),
              ("step", "p50"), ("harness", "per_step"), ("achieved", "tflops_per_device"),
              ("mfu", "model")]
    # the device table's utilisation and power means, and energy per token, side by side
    telemetry = summary[((summary["stat"] == "mean") & summary["unit"].isin(["%", "W"]))
                        | (summary["metric"] == "energy_per_output_token")]
    wanted += list(zip(telemetry["metric"], telemetry["stat"]))
    rows = summary.set_index(["metric", "stat"])
    for metric, stat in wanted:
        if (metric, stat) in rows.index:
            r = rows.loc[(metric, stat)]
            print(f"  {metric + ' ' + stat:28}{r['value']:>14.4g} {r['unit']}")
    return 0


def _read(run_dir: Path, name: str) -> pd.DataFrame:
    for fmt, reader in (("parquet", pd.read_parquet), ("csv", pd.read_csv)):
        path = run_dir / f"{name}.{fmt}"
        if path.exists():
            return reader(path)
    raise ValueError(f"no {name} table")


def _progress():
    """A progress bar on a terminal; plain lines (every 10%) when not a TTY, as in CI."""
    if sys.stderr.isatty():
        from tqdm import tqdm
        bar = {}

        def update(done, total):
            b = bar.setdefault("bar", tqdm(total=total, unit="req", file=sys.stderr))
            b.update(done - b.n)
            if done >= total:  # the run is over: the next one gets a bar of its own
                bar.pop("bar").close()
        return update
    last = [-1]

    def update(done, total):
        tenth = done * 10 // max(total, 1)
        if tenth > last[0]:
            last[0] = tenth
            print(f"  {done}/{total} requests done", file=sys.stderr)
    return update
