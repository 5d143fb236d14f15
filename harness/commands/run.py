"""steptrace run W.yaml: replay a workload into the engine, write its tables, show them."""

from __future__ import annotations

import sys

from ..atomic import WriteFailed
from . import show
from .common import BadInput, RunFailed, add_json, add_set, print_json
from .validate import load


def add(sub) -> None:
    p = sub.add_parser("run", help="replay a workload into the engine, write its tables")
    p.add_argument("workload")
    add_set(p, "engine.num_mtp=1")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    workload = load(args)
    from ..run import run_workload  # torch is imported only for a real run
    from ..workload import WorkloadError
    from ..workload_trace import TraceLoadError
    try:
        runs = run_workload(workload, _progress())
    except (WorkloadError, TraceLoadError) as e:
        raise BadInput(e) from None
    except WriteFailed as e:  # an output could not be written (harness/atomic.py)
        raise RunFailed(e) from e
    except Exception as e:  # the run failed: report it, with what was recorded on disk
        raise RunFailed(f"{type(e).__name__}: {e}") from e
    results = [show.read(run_dir) for run_dir in runs]
    if args.json:
        print_json(dict(runs=results))
    else:
        for result in results:
            show.print_text(result)
    return 0


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
