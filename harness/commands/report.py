"""steptrace report RUN_OR_SWEEP... -o DIR: figures, tables and a page a person can read."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import RunFailed
from .common import add_json, print_json


def add(p) -> None:
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_OR_SWEEP",
                   help="a run folder, or a folder of run folders")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                   help="the report folder: created, or a report this command made "
                   "replaced; anything else is refused")
    p.add_argument("--trace-events", action="store_true",
                   help="also write each run's steps as Chrome/Perfetto trace-event JSON")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    from ..analysis.report import build
    from ..io.atomic import WriteFailed

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
