"""steptrace run W.yaml: replay a workload into the engine, write its tables, show them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List

from fileio.atomic import WriteFailed

from ..errors import BadInput, RunFailed
from ..io.interrupt import Stop, signals_stop
from .common import add_json, add_set, pace, print_json


def add(p) -> None:
    p.add_argument("workload")
    add_set(p, "engine.num_mtp=1")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    """0 when every run completed; 128 + the signal's number (130 SIGINT, 143 SIGTERM) when a
    signal stopped the sweep, after writing what ran (harness/io/interrupt.py)."""
    from ..record.table_writer import start_early
    start_early()  # first: the writer warms up pyarrow while this process imports the rest
    from ..sweeps import gil_protocol
    from . import show
    from .validate import load
    workload = load(args)
    stop = Stop()
    with signals_stop(stop):  # from here on a signal stops the sweep instead of raising
        results = [run.result() for run in planned_runs(workload, stop)]
        planned = len(gil_protocol.planned(workload))
        if args.json:
            print_json(dict(runs=results, planned=planned, interrupted=stop.is_set(),
                            signal=stop.signal_name))
        else:
            for result in results:
                show.print_text(result)
            print_busy(results)
        said_interrupted(stop, results, planned)
    return stop.exit_code


def said_interrupted(stop: Stop, results, planned: int) -> None:
    """On stderr, when a signal stopped the sweep: which runs were written, how many not
    started."""
    if stop.is_set():
        written = ", ".join(f"{r['run_dir']} ({'complete' if r['complete'] else 'incomplete'})"
                            for r in results)
        print(f"steptrace: interrupted by {stop.signal_name}: {len(results)} of {planned} "
              f"runs written{': ' + written if written else ''}; "
              f"{planned - len(results)} not started", file=sys.stderr)


def print_busy(results) -> None:
    """A sweep's runs on a busy host, in one line after their summaries (each run's note
    says which of its figures)."""
    busy = [Path(r["run_dir"]).name for r in results if r["busy_host"]]
    if len(results) > 1 and busy:
        print(f"busy host: {len(busy)} of {len(results)} runs: {', '.join(busy)}; their "
              f"host-timed figures may be inflated (compare --drop-busy leaves them out)")


def planned_runs(workload, stop, progress=None, ran=None):
    """Every run the workload plans, run (harness/sweeps/sweep.py), as written.
    `progress` hears each run's requests (default: the lines or bar of `_progress`), `ran`
    each run written (run_workload)."""
    from engine.device_memory import DoesNotFit

    from ..sweeps.sweep import run_workload
    from ..workload import WorkloadError
    from ..workload.trace import TraceLoadError
    try:
        return run_workload(workload, _progress() if progress is None else progress, stop,
                            ran=ran)
    except BadInput:  # a run folder that cannot be made where the workload says
        raise
    except (WorkloadError, TraceLoadError) as e:
        raise BadInput(e) from None
    except DoesNotFit as e:  # the model on the device leaves no room: before any table
        raise BadInput(f"{workload.path}: engine.num_kv_blocks: {e}") from None
    except WriteFailed as e:  # an output could not be written (fileio/atomic.py)
        raise RunFailed(e) from e
    except Exception as e:  # the run failed: report it, with what was recorded on disk
        raise RunFailed(f"{type(e).__name__}: {e}") from e


def _progress():
    """A progress bar on a terminal; plain lines (every 10%) when not a TTY, as in CI."""
    if sys.stderr.isatty():
        from tqdm import tqdm
        bar: Dict[str, tqdm] = {}

        def update_bar(done, total):
            b = bar.setdefault("bar", tqdm(total=total, unit="req", file=sys.stderr))
            b.update(done - b.n)
            if done >= total:  # the run is over: the next one gets a bar of its own
                bar.pop("bar").close()
        return update_bar
    last: List[int] = [-1]
    start: List[float] = []  # the first report's time and count

    def update(done, total):
        tenth = done * 10 // max(total, 1)
        if tenth < last[0]:  # the next run of a sweep: its lines of its own
            last[0] = -1
            start.clear()
        if tenth > last[0]:
            last[0] = tenth
            print(f"  {done}/{total} requests done{pace(done, total, start)}", file=sys.stderr)
    return update
