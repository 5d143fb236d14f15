"""steptrace history add|show|detect: the results history across commits and its change
points (docs/comparing.md, "History and change points"). `detect` exits 0 with no
regression, 1 with one at or after --since, 2 on bad input."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import List

from ..analysis import change_points, history_bench, history_series, history_store
from ..analysis.gate import check_complete
from ..analysis.runs import find_runs, read_run
from ..errors import BadInput, RunFailed
from ..io.atomic import WriteFailed
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
                   "(default: the manifest's git_sha)")
    a.add_argument("--date", help="that commit's date, ISO 8601 (default: the manifest's "
                   "git_date)")
    s = sub.add_parser("show", help="the series per metric and configuration, a row per commit")
    s.add_argument("--csv", action="store_true", help="print the rows as CSV")
    d = sub.add_parser("detect", help="change points per metric and configuration (exit 1 on "
                       "a regression)")
    d.add_argument("--since", metavar="COMMIT", help="judge only the change points at this "
                   "commit's date or later (its hash or a prefix)")
    d.add_argument("--max-pvalue", type=float, default=change_points.MAX_PVALUE,
                   help="a change point's significance (default %(default)s)")
    d.add_argument("--min-change", type=float, default=0.0, metavar="PCT",
                   help="leave out changes smaller than PCT percent (default 0)")
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
    runs = [read_run(path) for path in find_runs(args.runs)] if args.runs else []
    check_complete(runs, "a", "the history holds complete runs only")
    writes = [(run.path, history_store.run_key(run), partial(
        history_store.rows, run, history_store.provenance(run, args.commit, args.date)))
        for run in runs]
    for path in args.bench:  # every file read and checked before anything is written
        data = history_bench.read(path)
        prov = history_bench.provenance(path, data, args.commit, args.date)
        history_bench.rows(path, data, prov)
        writes.append((path, history_bench.key(data),
                       partial(history_bench.rows, path, data, prov)))
    added: List[Path] = []
    present: List[Path] = []
    try:
        history_store.make(args.store)
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
    rows = history_store.read(args.store)
    chosen = history_series.select(rows, args.metric, history_series.parse_where(args.where))
    return rows, history_series.series(chosen)


def _show(args) -> int:
    _, table = _series(args)
    if args.json:
        print_json(dict(series=[dict(labels, unit=part["unit"].iloc[0], commits=part[
            ["commit", "commit_date", "runs", "median", "min", "max"]].to_dict("records"))
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
    return 0


def _detect(args) -> int:
    if not 0 < args.max_pvalue < 1 or not args.min_change >= 0:
        raise BadInput("history detect: --max-pvalue is between 0 and 1, --min-change a "
                       "percentage of 0 or more")
    rows, table = _series(args)
    since = change_points.since_date(rows, args.since)
    try:
        points = change_points.detect(table, args.max_pvalue, args.min_change / 100)
    except ImportError as e:
        raise BadInput(f"history detect needs Apache Otava ({e}): pip install --no-deps "
                       f"apache-otava==0.8.0 (or 'steptrace[history]', which pins numpy "
                       f"2.2.0)") from None
    judged = change_points.regressions(points, since)
    if args.json:
        print_json(dict(since=args.since, max_pvalue=args.max_pvalue,
                        regressions=len(judged), change_points=[p.to_dict() for p in points]))
    else:
        _print_points(points, judged, args)
    return 1 if judged else 0


def _print_points(points, judged, args) -> None:
    for p in points:
        flag = "REGRESSION" if p in judged else "regression" if p.regression else "change"
        print(f"{flag:11}{_title(p.series)}: {p.commit_before[:12]} -> {p.commit_after[:12]} "
              f"({p.date_after}): {p.mean_before:.4g} -> {p.mean_after:.4g} "
              f"({p.change_pct:+.1f}%), p = {p.pvalue:.2g}")
    since = f" at or after {args.since}" if args.since else ""
    print(f"history detect: {len(points)} change point(s), {len(judged)} regression(s){since} "
          f"(p < {args.max_pvalue:g})")


def _title(labels: dict) -> str:
    gil = f"gil {labels['gil_mode']}, " if labels["gil_mode"] else ""  # none: a benchmark
    return (f"{labels['metric']}.{labels['stat']} [{labels['workload']} "
            f"{labels['workload_hash'][:8]}, {labels['device']}, {gil}host {labels['host']}]")
