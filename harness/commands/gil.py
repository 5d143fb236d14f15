"""steptrace gil W.yaml: the GIL A/B protocol of a workload: `steptrace run` with `gil:
both`, the arms interleaved in shuffled blocks (docs/gil.md). Its --set values come after
that one, so `--set gil_aa=true` adds the A/A arm. It ends with the protocol's verdict:
each arm against the released arm on docs/gil.md's primary metrics, with the interval and
the noise floor (`steptrace compare --by gil_mode --baseline released` over the sweep's
runs)."""

from __future__ import annotations

import sys
import time

from ..io.interrupt import Stop, signals_stop
from ..sweeps import gil_protocol
from . import compare, run
from .common import add_json, add_set, pace, print_json
from .validate import load

BASELINE = "released"


def add(p) -> None:
    p.add_argument("workload")
    add_set(p, "gil_aa=true")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    args.set = ["gil=both", *args.set]
    workload = load(args)
    stop = Stop()
    with signals_stop(stop):  # from here on a signal stops the sweep instead of raising
        runs = run.planned_runs(workload, stop, progress=_quiet, ran=_ran_lines())
        results = [r.result() for r in runs]
        verdict = _verdict(runs)
        planned = len(gil_protocol.planned(workload))
        if args.json:
            print_json(dict(runs=results, planned=planned, interrupted=stop.is_set(),
                            signal=stop.signal_name, baseline=f"gil_mode={BASELINE}",
                            comparisons=[c.to_dict() for c in verdict]))
        else:
            _print_runs(results)
            for comparison in verdict:
                print()
                compare.print_text(comparison)
            run.print_busy(results)  # the runs on a busy host, once: each verdict counts them
        run.said_interrupted(stop, results, planned)
    return stop.exit_code


def _quiet(done: int, total: int) -> None:
    """A run's requests: not said, its end is (`_ran_lines`)."""


def _ran_lines():
    """One line a run on stderr as it is written: which of how many, its arm and block, and
    the sweep's pace and the time left at it (`run`'s)."""
    start = [time.perf_counter(), 0]

    def ran(done: int, planned: int, which) -> None:
        print(f"  run {done} of {planned} written ({which.arm}, block {which.block}, switch "
              f"interval {which.switch_interval_s:g} s)"
              f"{pace(done, planned, start, unit='run')}", file=sys.stderr)
    return ran


def _verdict(runs):
    """Each arm against the released one, in a sweep's order of arms, over the complete
    runs; none unless they hold the released arm and another."""
    from ..analysis.compare import compare as compared, gil_arms

    found = gil_arms(runs)
    return [compared(found[0], other) for other in found[1:]]


def _print_runs(results) -> None:
    """One line a run, in the order they ran (each run's summary: `steptrace show`)."""
    print(f"{len(results)} runs (steptrace show RUN_DIR prints one's summary):")
    for r in results:
        state = "complete" if r["complete"] else "incomplete"
        busy = ", busy host" if r["busy_host"] else ""
        print(f"  {r['run_dir']}  [{state}{busy}]")
