"""steptrace history add|show|detect: the results history across commits and its change
points (docs/comparing.md, "History and change points"). `detect` exits 0 with no
regression, 1 with one at or after --since, 2 on bad input."""

from __future__ import annotations

import math
import sys
from functools import partial
from pathlib import Path
from typing import List

from fileio.atomic import WriteFailed

from ..analysis import change_points, history_bench, history_series, history_store
from ..analysis.gate import check_complete
from ..analysis.runs import load_runs
from ..errors import BadInput, RunFailed
from .common import add_json, print_json


def add(p) -> None:
    p.description = ("A history of runs' summary metrics across commits of the engine, and "
                     "the change points in it.")
    sub = p.add_subparsers(dest="history", required=True, metavar="{add,show,detect}")
    a = sub.add_parser("add", help="add runs to the history")
    a.add_argument("runs", nargs="*", metavar="RUN_OR_FOLDER",
                   help="run folders, globs or folders holding runs (a sweep's)")
    a.add_argument("--bench", action="append", default=[], type=Path, metavar="BENCH.json",
                   help="a pytest-benchmark JSON file (--benchmark-json): each benchmark's "
                   "median as a metric (repeatable; default commit: its commit_info)")
    a.add_argument("--commit", help="the git commit of the engine the runs measured "
                   "(default: the manifest's git_sha: the run's $STEPTRACE_COMMIT, or the "
                   "harness's own checkout)")
    a.add_argument("--date", help="that commit's date, ISO 8601 (default: the manifest's "
                   "git_date)")
    a.add_argument("--runner", metavar="NAME", help="the class of machine that ran them "
                   "(a CI runner's label): series are kept apart by it (default: "
                   f"${history_store.RUNNER_VARIABLE}, else none: the host is a label, not "
                   "part of a series)")
    s = sub.add_parser("show", help="the series per metric and configuration, a row per commit")
    s.add_argument("--csv", action="store_true", help="print the rows as CSV")
    d = sub.add_parser("detect", help="change points per metric and configuration (exit 1 on "
                       "a regression)")
    d.add_argument("--since", metavar="COMMIT", help="judge only the change points at this "
                   "commit's date or later (its hash or a prefix)")
    d.add_argument("--max-pvalue", type=float, default=change_points.MAX_PVALUE,
                   help="a change point's significance (default %(default)s)")
    d.add_argument("--min-change", type=float, default=0.0, metavar="PCT",
                   help="leave out changes smaller than PCT percent, 0 to "
                   f"{change_points.MAX_MIN_CHANGE:g} (default 0: each metric's noise floor, "
                   "docs/comparing.md)")
    d.add_argument("--noise-floor", action="append", default=[], metavar="CLASS=PCT",
                   help="set the noise floor of a class of metrics, lower or higher: "
                   f"{_floors(change_points.NOISE_FLOORS, 0, '%%')} by default "
                   "(repeatable; host=10%% on a dedicated quiet runner)")
    for parsed, handler in ((a, _add), (s, _show), (d, _detect)):
        parsed.add_argument("--store", type=Path, required=True, metavar="STORE",
                            help="the history: a folder of Parquet files, one per run")
        if parsed is not a:
            parsed.add_argument("--metric", metavar="M", help="one metric (ttft.p99) or "
                                "every stat of one (ttft)")
            parsed.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                                help="only the rows whose label KEY is VALUE (repeatable)")
        add_json(parsed)
        parsed.set_defaults(handler=handler)


def main(args) -> int:
    return args.handler(args)


def _add(args) -> int:
    if not args.runs and not args.bench:
        raise BadInput("history add: name runs (RUN_OR_FOLDER) or --bench BENCH.json")
    runs = load_runs(args.runs) if args.runs else []
    check_complete(runs, "a", "the history holds complete runs only")
    runner = history_store.runner(args.runner)
    writes = [(run.path, history_store.run_key(run), partial(
        history_store.rows, run, history_store.provenance(run, args.commit, args.date),
        runner)) for run in runs]
    for path in args.bench:  # every file read and checked before anything is written
        data = history_bench.read(path)
        prov = history_bench.provenance(path, data, args.commit, args.date)
        history_bench.rows(path, data, prov, runner)
        writes.append((path, history_bench.key(data),
                       partial(history_bench.rows, path, data, prov, runner)))
    added: List[Path] = []
    present: List[Path] = []
    try:
        history_store.prepare(args.store, [run.path for run in runs])
        for path, key, table in writes:
            (added if history_store.write(args.store, key, table) else present).append(path)
    except WriteFailed as e:
        raise RunFailed(e) from e
    if args.json:
        print_json(dict(store=str(args.store), added=[str(p) for p in added],
                        already_there=[str(p) for p in present]))
    else:
        print(f"history {args.store}: added {len(added)} run(s)"
              + (f", {len(present)} already there" if present else ""))
    return 0


def _series(args):
    """The store's rows, the series of those chosen, and how many of their values are
    left out (not finite)."""
    rows = history_store.read(args.store)
    chosen = history_series.select(rows, args.metric, history_series.parse_where(args.where))
    return rows, history_series.series(chosen), history_series.non_finite(chosen)


def _show(args) -> int:
    _, table, left_out = _series(args)
    if args.json:
        print_json(dict(non_finite=left_out, series=[dict(labels, unit=part["unit"].iloc[0],
            commits=part[["commit", "commit_date", "host", "runs", "median", "min",
                          "max"]].to_dict("records"))
            for labels, part in history_series.each_series(table)]))
    elif args.csv:
        table.to_csv(sys.stdout, index=False)
    else:
        for labels, part in history_series.each_series(table):
            print(_title(labels))
            print(f"  {'commit':14}{'date':27}{'runs':>5}{'median':>12}{'min':>12}{'max':>12}"
                  f"  {part['unit'].iloc[0]}")
            for r in part.itertuples():
                print(f"  {r.commit[:12]:14}{r.commit_date:27}{r.runs:>5}{r.median:>12.4g}"
                      f"{r.min:>12.4g}{r.max:>12.4g}")
        if left_out:
            print(_left_out(left_out))
    return 0


def _left_out(count: int) -> str:
    return (f"{count} value(s) left out: not a finite number (NaN or an infinity in the "
            f"store's files)")


def _detect(args) -> int:
    if not 0 < args.max_pvalue < 1:
        raise BadInput(f"--max-pvalue {args.max_pvalue:g}: expected a p-value between 0 and 1")
    if not 0 <= args.min_change <= change_points.MAX_MIN_CHANGE:
        raise BadInput(f"--min-change {args.min_change:g}: expected a percentage from 0 to "
                       f"{change_points.MAX_MIN_CHANGE:g} (an elevenfold change; a floor "
                       f"above it would hide every change)")
    floors = change_points.noise_floors(args.noise_floor)
    rows, table, left_out = _series(args)
    since = change_points.since_date(rows, args.since)
    try:
        points = change_points.detect(table, args.max_pvalue, args.min_change / 100, floors)
    except ImportError as e:
        raise BadInput(f"history detect needs Apache Otava ({e}): pip install --no-deps "
                       f"apache-otava==0.8.0 (or 'steptrace[history]', which pins numpy "
                       f"2.2.0)") from None
    judged = change_points.regressions(points, since)
    short = change_points.too_short(table)
    unjudged = change_points.not_judged(table, floors)
    if args.json:  # an infinite floor (not judged) is null
        print_json(dict(since=args.since, max_pvalue=args.max_pvalue,
                        min_segment=change_points.MIN_SEGMENT, noise_floors=floors,
                        min_change=args.min_change / 100, too_short=short,
                        not_judged=unjudged, non_finite=left_out, regressions=len(judged),
                        change_points=[p.to_dict() for p in points]))
    else:
        _print_points(points, judged, args, short, left_out, floors)
        if unjudged:
            print(f"{unjudged} series not judged: the host's timings and readings, which "
                  f"its load moves more than any useful floor; on a dedicated, quiet runner "
                  f"set one (--noise-floor host=PCT; docs/comparing.md, \"Noise floors\")")
    return 1 if judged else 0


def _print_points(points, judged, args, short: int, left_out: int, floors) -> None:
    for p in points:
        flag = "REGRESSION" if p in judged else "regression" if p.regression else "change"
        print(f"{flag:11}{_title(p.series)}: {p.commit_before[:12]} -> {p.commit_after[:12]} "
              f"({p.date_after}): {p.mean_before:.4g} -> {p.mean_after:.4g} "
              f"({p.change_text()}), p = {p.pvalue:.2g}")
    since = f" at or after {args.since}" if args.since else ""
    print(f"history detect: {len(points)} change point(s), {len(judged)} regression(s){since} "
          f"(p < {args.max_pvalue:g}, {change_points.MIN_SEGMENT} commits a side or more, "
          f"changes beyond the noise floors: {_floors(floors, args.min_change / 100)})")
    if short:
        print(f"{short} series not judged: fewer than {2 * change_points.MIN_SEGMENT} commits "
              f"(a change point needs {change_points.MIN_SEGMENT} on either side)")
    if left_out:
        print(_left_out(left_out))


def _floors(floors, least: float, percent: str = "%") -> str:
    """The floors by class, each raised to `least` (--min-change): "host 50%, bench 10%"
    ("host not judged" where infinite)."""
    return ", ".join(f"{name} not judged" if math.isinf(floor) else
                     f"{name} {max(least, floor) * 100:g}{percent}"
                     for name, floor in floors.items())


def _title(labels: dict) -> str:
    gil = f"gil {labels['gil_mode']}, " if labels["gil_mode"] else ""  # none: a benchmark
    runner = f"runner {labels['runner']}, " if labels["runner"] else ""
    return (f"{labels['metric']}.{labels['stat']} [{labels['workload']} "
            f"{labels['workload_hash'][:8]}, {labels['device']}, {gil}{runner}"
            f"host {labels['host']}]")
