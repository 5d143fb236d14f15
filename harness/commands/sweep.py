"""steptrace sweep SWEEP.yaml: many points, each the base workload with its own overrides,
run (or searched for its capacity) in processes of this host or, with --ray, as tasks of a
Ray cluster, into one `sweep` table with each front's Pareto points (docs/sweeps.md). Not
`run`'s sweep of one workload's runs.

Exit 0 when every valid point is done; 1 when a point failed (the others ran, the table is
written); 2 bad input (the sweep file, its base, --set, --front-by; --ray without Ray
installed or no cluster there), before anything runs.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from ..errors import BadInput
from .common import add_json, add_set, print_json


def add(p) -> None:
    p.add_argument("sweep", help="the sweep file (docs/sweeps.md)")
    add_set(p, "output=/tmp/sweeps")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="points run at once, each in a process of its own (default: the "
                        "host's cores)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run the points as tasks of the Ray cluster at ADDRESS (host:port; "
                        "overrides the sweep file's ray.address); the output must be a "
                        "path every node sees (docs/sweeps.md, \"Ray\")")
    p.add_argument("--fresh", action="store_true",
                   help="run every point again, even one whose folder holds a complete "
                        "result (default: resume, skipping those)")
    p.add_argument("--front-by", default="device", metavar="KEY.PATH",
                   help="the workload key whose values group the Pareto fronts "
                        "(default: device)")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    from ..record.table_sink import write_table
    from ..sweeps.points import pd_ratio as ratio_search
    from ..sweeps.points.execute import execute
    from ..sweeps.points.pool import run_unless_stopped
    from ..sweeps.points.table import TABLE, table

    the_plan = _plan(args)
    pd_ratio = the_plan.sweep.method == "pd_ratio"
    searched = the_plan.sweep.method == "optuna"
    if searched:
        from ..sweeps.points.optuna_search import SearchError, import_optuna, search
        try:
            import_optuna()
        except SearchError as e:
            raise BadInput(f"{the_plan.sweep.path}: search.method optuna: {e}") from None
    total = (the_plan.sweep.n or 0) if searched else \
        ratio_search.planned(the_plan) if pd_ratio else len(the_plan.unique)
    with _executor(args, the_plan, total) as executor:
        if pd_ratio:
            rows = ratio_search.search(the_plan, executor, run_unless_stopped, args.fresh,
                                       _progress(total))
        elif searched:
            try:
                rows = search(the_plan, executor, run_unless_stopped, args.fresh,
                              _progress(total), args.workers)
            except SearchError as e:
                raise BadInput(e) from None
        else:
            rows = execute(the_plan, executor, args.fresh, _progress(total), run_unless_stopped)
    df = table(rows, the_plan.sweep.prices)
    the_plan.folder.mkdir(parents=True, exist_ok=True)
    path = write_table(df, the_plan.folder, TABLE, "parquet")
    result = dict(sweep=str(the_plan.sweep.path), name=the_plan.sweep.name,
                  mode=the_plan.sweep.mode, folder=str(the_plan.folder), table=str(path),
                  front_by=args.front_by, **_counts(df), rows=_rows(df))
    if args.json:
        print_json(result)
    else:
        print_text(result)
    return 1 if result["failed"] else 0


def _plan(args):
    """The sweep's plan, its refused points listed on stderr; BadInput for bad input."""
    from ..sweeps.points import pd_ratio
    from ..sweeps.points.execute import plan
    from ..sweeps.points.sweep_file import SweepError, not_a_key

    if args.workers < 1:
        raise BadInput(f"--workers: expected an integer >= 1, got {args.workers}")
    reason = not_a_key(args.front_by)
    if reason:
        raise BadInput(f"--front-by {args.front_by}: {reason}")
    try:
        the_plan = plan(args.sweep, tuple(args.set), args.front_by)
    except SweepError as e:
        raise BadInput(e) from None
    if the_plan.sweep.method == "pd_ratio":  # points whose pools it cannot measure refused
        the_plan = pd_ratio.checked(the_plan)
    for refused in the_plan.refused:
        print(f"steptrace: refused: {_axes(refused.axes)}: {refused.reason}", file=sys.stderr)
    return the_plan


@contextmanager
def _executor(args, the_plan, points: int):
    """This host's pool, or with --ray (or the file's ray.address) the cluster's tasks."""
    address = args.ray or the_plan.sweep.ray_address
    if address is None:
        from ..sweeps.points.pool import host_pool

        with host_pool(min(args.workers, max(1, points))) as pool:
            yield pool
        return
    from ..sweeps.points.ray_cluster import ClusterError, connect, ray_tasks

    try:
        ray = connect(address)
    except ClusterError as e:
        where = f"--ray {address}" if args.ray else f"{the_plan.sweep.path}: ray.address"
        raise BadInput(f"{where}: {e}") from None
    with ray_tasks(ray) as tasks:
        yield tasks


def _counts(df) -> dict:
    status = df["status"]
    return dict(points=len(df), done=int((status == "done").sum()),
                skipped=int(df["skipped"].sum()), failed=int((status == "failed").sum()),
                refused=int((status == "refused").sum()))


def _rows(df) -> list:
    import json

    return [dict(r, axes=json.loads(r["axes"]), concurrency=None if r["concurrency"] is None
                 or r["concurrency"] != r["concurrency"] else int(r["concurrency"]))
            for r in df.astype(object).where(df.notna(), None).to_dict("records")]


def _axes(axes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def _progress(total: int):
    """One bar for the sweep on a terminal; a line a point when not a TTY, as in CI."""
    if sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=total, unit="point", file=sys.stderr, disable=not total)

        def update_bar(counts):
            bar.total = counts.get("total", total)  # a P/D ratio search's grows
            bar.set_postfix(done=counts["done"], skipped=counts["skipped"],
                            failed=counts["failed"], refresh=False)
            bar.update(bar.total - counts["left"] - bar.n)
            if not counts["left"]:
                bar.close()
        return update_bar

    def update(counts):
        of = counts.get("total", total)
        print(f"  sweep: {of - counts['left']} of {of} points: {counts['done']} done, "
              f"{counts['skipped']} skipped (complete), {counts['failed']} failed",
              file=sys.stderr)
    return update


def print_text(r: dict) -> None:
    print(f"steptrace sweep: {r['name']} ({r['mode']} mode): {r['points']} points, "
          f"{r['done']} done ({r['skipped']} skipped, complete before), {r['failed']} "
          f"failed, {r['refused']} refused; Pareto fronts by {r['front_by']}")
    print(f"{'point':<12} {'status':<8} {'out tok/s/device':>17} {'tok/s/user':>11} "
          f"{'ttft p99 s':>11} {'tpot p50 s':>11} {'pareto':>6}  axes")
    for row in r["rows"]:
        figures = "".join(f" {_figure(row[k], w)}" for k, w in (
            ("output_tokens_per_device", 17), ("tokens_per_s_per_user", 11),
            ("ttft_p99_s", 11), ("tpot_p50_s", 11)))
        print(f"{row['point'] or '-':<12} {row['status']:<8}{figures} "
              f"{'*' if row['pareto'] else '':>6}  {_axes(row['axes'])}")
        if row["reason"]:
            print(f"{'':<12} {row['reason']}")
    print(f"  table: {r['table']}")


def _figure(v, width: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width},.4g}"
