"""steptrace sweep SWEEP.yaml: many points, each the base workload with its own overrides,
run (or searched for its capacity) in processes of this host or a Ray cluster's (--ray),
into one `sweep` table with each front's Pareto points (docs/sweeps.md). Not
`run`'s sweep of one workload's runs.

Exit 0 when every valid point is done, with an answer or without one (a capacity search
that found none: said by its outcome and counted apart); 1 when a point failed or was not
run (the others ran, the table is written) or the table could not be written (the points
kept); 2 bad input (the sweep file, its base, --set, --front-by; --ray without Ray
installed or no cluster there; nothing to run; a folder another sweep owns or this one
cannot: harness/sweeps/points/owner.py), before anything runs; 130 / 143 when a signal
stopped it.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, List

from ..errors import BadInput, RunFailed
from .common import add_json, add_set, interrupted, pace, print_json
from .sweep_text import axes_line, points, print_text


def add(p) -> None:
    p.add_argument("sweep", help="the sweep file (docs/sweeps.md)")
    add_set(p, "output=/tmp/sweeps")
    p.add_argument("--workers", type=int, metavar="N",
                   help="points run at once, each in a process of its own (default: the "
                        "cores this host gives the sweep)")
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
    """The sweep run and its table written. Ctrl-C or SIGTERM stops it (harness/sweeps/
    points/pool.py): once the sweep holds its folder, one line saying what it keeps there,
    with --json one document too, exit 130 / 143 (before, the entry point's line)."""
    seen: Dict[str, Any] = {}  # the sweep's folder and its counts so far, for that line
    try:
        return _sweep(args, seen)
    except KeyboardInterrupt as e:
        if "folder" not in seen:
            raise
        return _interrupted(args, e, seen)


def _sweep(args, seen: Dict[str, Any]) -> int:
    from ..sweeps.frontier import search as frontier_search
    from ..sweeps.points import pd_ratio as ratio_search
    from ..sweeps.points.owner import owned
    from ..sweeps.points.table import table
    from ..sweeps.points.workers import cores, workers

    the_plan = _plan(args)
    method = the_plan.sweep.method
    if method == "optuna":
        from ..sweeps.points.optuna_search import SearchError, import_optuna
        try:
            import_optuna()
        except SearchError as e:
            raise BadInput(f"{the_plan.sweep.path}: search.method optuna: {e}") from None
    deployments = _deployments(the_plan) if method == "frontier" else []
    total = (the_plan.sweep.n or 0) if method == "optuna" else \
        ratio_search.planned(the_plan) if method == "pd_ratio" else \
        frontier_search.planned(deployments) if method == "frontier" else len(the_plan.unique)
    args.workers = workers(args.workers or cores(), total,
                           not (args.ray or the_plan.sweep.ray_address))
    progress = _progress(total, seen)
    start = _executor(args, the_plan, total)  # a Ray cluster reached before the folder
    # the folder is this sweep's from before any point runs until its table is written and
    # its last worker is gone: one stopped by a signal still writes its point's interrupted
    # run there, and a second sweep would remove that point's folder as it is written
    with owned(the_plan.folder, [p.folder for p in the_plan.unique]):
        seen["folder"], seen["points"] = the_plan.folder, [p.folder for p in the_plan.unique]
        with start() as executor:
            if not args.fresh:
                _said_incomplete(the_plan.unique)
            rows = _points(the_plan, executor, args, progress, deployments)
            if all(r["status"] == "refused" for r in rows):  # an optuna search's draws
                raise _nothing_to_run(the_plan.sweep, [r["reason"] for r in rows])
            df = table(rows, the_plan.sweep.prices)
            seen["table"] = path = _write(df, the_plan.folder)
    result = dict(sweep=str(the_plan.sweep.path), name=the_plan.sweep.name,
                  mode=the_plan.sweep.mode, folder=str(the_plan.folder), table=str(path),
                  front_by=args.front_by, **points(df))
    if method == "frontier":
        result["frontier"] = frontier_search.answer_of(the_plan.folder)
    if args.json:
        print_json(result)
    else:
        print_text(result)
        if method == "frontier":
            print(f"\n{result['frontier']['summary_text']}", end="")
    return 1 if result["failed"] else 0


def _deployments(the_plan) -> list:
    """The frontier search's deployments, estimated and pruned before anything runs;
    BadInput where a device is left without one."""
    from ..sweeps.frontier.search import deployments
    from ..sweeps.points.sweep_file import SweepError

    try:
        return deployments(the_plan)
    except SweepError as e:
        raise BadInput(e) from None


def _points(the_plan, executor, args, progress, deployments: list) -> list:
    """Every point's row, as the sweep's search method runs them on `executor`."""
    from ..sweeps.points import pd_ratio as ratio_search
    from ..sweeps.points.execute import execute
    from ..sweeps.points.pool import run_unless_stopped

    if the_plan.sweep.method == "frontier":
        from ..sweeps.frontier.search import search as frontier
        from ..sweeps.points.ray_cluster import RayTasks
        workers = executor.cpus() if isinstance(executor, RayTasks) else args.workers
        return frontier(the_plan, deployments, executor, run_unless_stopped, args.fresh,
                        progress, workers)
    if the_plan.sweep.method == "pd_ratio":
        return ratio_search.search(the_plan, executor, run_unless_stopped, args.fresh, progress)
    if the_plan.sweep.method == "optuna":
        from ..sweeps.points.optuna_search import SearchError, search
        try:
            return search(the_plan, executor, run_unless_stopped, args.fresh, progress,
                          args.workers)
        except SearchError as e:
            raise BadInput(e) from None
    return execute(the_plan, executor, args.fresh, progress, run_unless_stopped)


def _write(df, folder: Path) -> Path:
    """The sweep's table in its folder; RunFailed naming it where it cannot be written (a
    full disk, a file-size limit): the points' folders stay, and the sweep run again
    resumes them all and writes it."""
    from ..record.table_sink import write_table
    from ..sweeps.points.point import POINTS
    from ..sweeps.points.table import TABLE

    try:
        return write_table(df, folder, TABLE, "parquet")
    except OSError as e:  # pyarrow's words wrap the OS's: said in the OS's
        reason = os.strerror(e.errno) if e.errno else str(e)
        raise RunFailed(f"cannot write {folder / TABLE}.parquet: {reason}; the points are "
                        f"kept in {folder / POINTS}: run the sweep again to write the "
                        f"table") from e


def _interrupted(args, signal: KeyboardInterrupt, seen: Dict[str, Any]) -> int:
    """The entry point's line for a signal (harness/commands/__init__.py), with what the
    sweep keeps; with --json the failure's document too."""
    from ..errors import Terminated
    from ..sweeps.points.point import POINTS

    name, code = ("SIGTERM", 143) if isinstance(signal, Terminated) else \
        ("SIGINT (Ctrl-C)", 130)
    counts = seen.get("counts", {})
    message = f"interrupted by {name}: the table is written: {seen['table']}" \
        if "table" in seen else \
        (f"interrupted by {name}: the table is not written; the {_kept(seen)} of "
         f"{counts.get('total', seen['total'])} points complete so far are kept in "
         f"{seen['folder'] / POINTS}: run the sweep again to resume")
    return interrupted(message, code, args.json)


def _kept(seen: Dict[str, Any]) -> int:
    """The points complete on disk now, their point.json read back: a worker may have
    written one that the sweep was not told of before the signal. A search's points (drawn
    as it goes) are every folder in points/."""
    from ..sweeps.points import marker
    from ..sweeps.points.point import POINTS

    folders = seen["points"]
    if not folders:
        points = seen["folder"] / POINTS
        folders = sorted(points.iterdir()) if points.is_dir() and not points.is_symlink() \
            else []
    return sum(marker.read(folder) is not None for folder in folders)


def _said_incomplete(points) -> None:
    """One line for the points whose point.json is not a complete row: they run again."""
    from ..sweeps.points import marker

    bad = [why for why in (marker.problem(p.folder) for p in points) if why]
    if bad:
        print(f"steptrace: note: {len(bad)} point(s) hold a {marker.MARKER} that is not a "
              f"complete point's row, and run again (the first: {bad[0]})", file=sys.stderr)


def _nothing_to_run(sweep, refused: List[str]) -> BadInput:
    """Bad input: the sweep file plans no point that can run."""
    if refused:
        return BadInput(f"{sweep.path}: nothing to run: every point is refused ({len(refused)}; "
                        f"the first: {refused[0]})")
    from ..sweeps.points.where import shown

    return BadInput(f"{sweep.path}: nothing to run: where: {shown(sweep.where)} holds for no "
                    f"point")


def _plan(args):
    """The sweep's plan, its refused points listed on stderr; BadInput for bad input."""
    from ..sweeps.points import pd_ratio
    from ..sweeps.points.execute import plan
    from ..sweeps.points.sweep_file import SweepError, not_a_key

    if args.workers is not None and args.workers < 1:
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
        print(f"steptrace: refused: {axes_line(refused.axes)}: {refused.reason}", file=sys.stderr)
    if the_plan.sweep.method != "optuna" and not the_plan.unique:  # before anything runs
        raise _nothing_to_run(the_plan.sweep, [p.reason for p in the_plan.refused])
    return the_plan


def _executor(args, the_plan, points: int) -> Callable[[], ContextManager[Executor]]:
    """What starts this host's pool, or with --ray (or the file's ray.address) the
    cluster's tasks: the cluster connected now, BadInput where it cannot be."""
    address = args.ray or the_plan.sweep.ray_address
    if address is None:
        from ..sweeps.points.pool import host_pool

        return lambda: host_pool(min(args.workers, max(1, points)))
    from ..sweeps.points.ray_cluster import ClusterError, connect, ray_tasks

    try:
        ray = connect(address)
    except ClusterError as e:
        where = f"--ray {address}" if args.ray else f"{the_plan.sweep.path}: ray.address"
        raise BadInput(f"{where}: {e}") from None
    return lambda: ray_tasks(ray)


def _progress(total: int, seen: Dict[str, Any]):
    """One bar for the sweep on a terminal; a line a point when not a TTY, as in CI, with
    the pace of the points run (those complete before take no time) and the time left.
    Each count kept in `seen`."""
    seen["total"] = total
    if sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=total, unit="point", file=sys.stderr, disable=not total)

        def update_bar(counts):
            seen["counts"] = counts
            bar.total = counts.get("total", total)  # a P/D ratio search's grows
            bar.set_postfix(done=counts["done"], skipped=counts["skipped"],
                            failed=counts["failed"], refresh=False)
            bar.update(bar.total - counts["left"] - bar.n)
            if not counts["left"]:
                bar.close()
        return update_bar
    start = [time.perf_counter(), 0]  # the pace from the sweep's start

    def update(counts):
        seen["counts"] = counts
        of = counts.get("total", total)
        ran = counts["done"] + counts["failed"]
        print(f"  sweep: {of - counts['left']} of {of} points: {counts['done']} done, "
              f"{counts['skipped']} skipped (complete), {counts['failed']} failed"
              f"{pace(ran, ran + counts['left'], start, 'points')}", file=sys.stderr)
    return update
