"""steptrace report RUN_OR_SWEEP... -o DIR: figures, tables and a page a person can read; of
one `steptrace sweep`'s folder, its fronts (docs/report.md, "The sweep page")."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import BadInput, RunFailed
from .common import add_json, print_json


def add(p) -> None:
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN_OR_SWEEP",
                   help="a run folder, or a folder of run folders")
    p.add_argument("--history", type=Path, metavar="STORE",
                   help="instead of runs: the trend page of a history store (steptrace "
                   "history): each headline metric over commits, with its change points")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                   help="the report folder: created, or a report this command made "
                   "replaced; anything else is refused")
    p.add_argument("--front-by", metavar="KEY.PATH",
                   help="a sweep's page: group its fronts by device or one of its axes "
                   "(default: the sweep's own --front-by)")
    p.add_argument("--interactivity", metavar="TOK_S,...",
                   help="a sweep's page: the tokens/s per user at which the best "
                   "configurations are compared (default: 20,50,100)")
    p.add_argument("--noise-floor", action="append", default=[], metavar="CLASS=PCT",
                   help="a trend page's change points: a class's noise floor, as `history "
                   "detect --noise-floor` sets it (repeatable)")
    p.add_argument("--trace-events", action="store_true",
                   help="also write each run's steps as Chrome/Perfetto trace-event JSON")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    from fileio.atomic import WriteFailed

    from ..analysis.report import build

    if bool(args.runs) == bool(args.history):
        raise BadInput("report: name runs (RUN_OR_SWEEP) or --history STORE, not both")
    if args.history:
        return _history(args)
    if args.noise_floor:
        raise BadInput("report: --noise-floor is for a history's trend page (--history STORE)")
    from ..analysis.report.sweep_page import is_sweep

    if len(args.runs) == 1 and is_sweep(args.runs[0]):
        return _sweep(args)
    if args.front_by or args.interactivity:
        raise BadInput("report: --front-by and --interactivity are for one sweep's folder "
                       "(one that holds sweep.parquet)")
    started = time.perf_counter()
    try:
        written = build(args.runs, args.output, args.trace_events)
    except WriteFailed as e:  # good input, a report that could not be written: DIR as it was
        raise RunFailed(e) from e
    seconds = time.perf_counter() - started
    result = dict(dir=str(written.dir), index=str(written.dir / "index.html"),
                  summary=str(written.dir / "summary.md"), runs=written.runs,
                  arms=written.arms, figures=written.figures,
                  trace_events=written.trace_events, seconds=seconds)
    if args.json:
        print_json(result)
    else:
        print(f"{result['index']}  ({written.runs} run{'s' * (written.runs > 1)}, "
              f"{len(written.arms)} arm{'s' * (len(written.arms) > 1)}: "
              f"{'; '.join(written.arms)}; {len(written.figures)} figures; {seconds:.1f} s)")
        print(result["summary"])
        for path in written.trace_events:
            print(written.dir / path)
    return 0


def _history(args) -> int:
    from fileio.atomic import WriteFailed

    from ..analysis.report import build_history

    if args.trace_events:
        raise BadInput("report --history: --trace-events is for runs")
    try:
        written = build_history(args.history, args.output, args.noise_floor)
    except WriteFailed as e:
        raise RunFailed(e) from e
    index, summary = written.dir / "index.html", written.dir / "summary.md"
    if args.json:
        print_json(dict(dir=str(written.dir), index=str(index), summary=str(summary),
                        runs=written.runs, figures=written.figures))
    else:
        print(f"{index}  ({written.runs} run{'s' * (written.runs != 1)}; "
              f"{len(written.figures)} figures)")
        print(summary)
    return 0


def _sweep(args) -> int:
    from fileio.atomic import WriteFailed

    from ..analysis.report.sweep_data import LEVELS, levels_from
    from ..analysis.report.sweep_page import build_sweep

    if args.trace_events:
        raise BadInput("report: --trace-events is for runs, not a sweep's page")
    levels = levels_from(args.interactivity) if args.interactivity else LEVELS
    try:
        written = build_sweep(args.runs[0], args.output, args.front_by, levels)
    except WriteFailed as e:
        raise RunFailed(e) from e
    index, summary = written.dir / "index.html", written.dir / "summary.md"
    if args.json:
        print_json(dict(dir=str(written.dir), index=str(index), summary=str(summary),
                        done=written.runs, groups=written.arms, figures=written.figures))
    else:
        points = f"{written.runs} point{'s' * (written.runs != 1)}"
        print(f"{index}  (sweep: {points} with an answer, fronts of "
              f"{', '.join(written.arms)}; {len(written.figures)} figures)")
        print(summary)
    return 0
