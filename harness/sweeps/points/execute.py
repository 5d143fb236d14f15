"""A sweep planned and run: the points from the sweep file, resolved and refused before
any work; the complete ones taken from their folders (resume); the rest fanned out, one
point a task, to an executor's processes (Fan: points started one at a time, their
results taken as they end); the rows gathered in the grid's order."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

from ...workload import WorkloadError, load_workload
from . import marker
from .answer import empty_answer
from .expand import drawn, grid, kept, sample
from .point import LateWhere, Point, Refused, resolve
from .sweep_file import SweepError, SweepFile, check_prices, load_sweep, not_a_key
from .table import row
from .task import run_point
from .where import WhereError, compile_where, shown

Progress = Callable[[Dict[str, int]], None]  # counts: done, skipped, failed, left
Task = Callable[[Point], Dict]  # a point to its result: run_point, where it runs
_NOT_SEEN = ("its task ended done, but {folder}/{marker} is not visible here: the sweep's "
             "output must be a path every node running points sees, a shared filesystem "
             "(docs/sweeps.md, \"Ray\")")


@dataclass(frozen=True)
class SweepPlan:
    sweep: SweepFile
    folder: Path  # <output>/<sweep name>/: the table and points/
    points: Tuple[Union[Point, Refused], ...]  # in the grid's order; optuna: drawn as it goes
    sets: Tuple[str, ...] = ()
    front_by: str = "device"

    @property
    def refused(self) -> List[Refused]:
        return [p for p in self.points if isinstance(p, Refused)]

    @property
    def unique(self) -> List[Point]:
        """The points to run, each key once (two axis values may resolve alike)."""
        return list({p.key: p for p in self.points if isinstance(p, Point)}.values())


def plan(path, sets: Tuple[str, ...] = (), front_by: str = "device") -> SweepPlan:
    """The sweep file's points, resolved; SweepError (bad input) naming the file and key,
    before anything runs."""
    sweep = load_sweep(path)
    try:
        base = load_workload(sweep.base, sets)
    except WorkloadError as e:
        raise SweepError(f"{sweep.path}: base: {e}") from None
    folder = Path(base.output) / sweep.name
    if sweep.method == "optuna":  # its points are drawn as the search goes (optuna_search.py)
        check_prices(sweep, sweep.axes.get("device", (base.device,)))
        return SweepPlan(sweep, folder, (), sets, front_by)
    where = compile_where(sweep.where, sweep.axes, not_a_key) if sweep.where else None
    # a `where` of axes alone filters the grid; one naming other keys each resolved point
    late = LateWhere(where, base.values) \
        if where is not None and not where.names <= set(sweep.axes) else None
    try:
        if sweep.method == "random" and late is None:  # drawn from the grid unexpanded
            assert sweep.n is not None  # load_sweep: random takes n
            combos = drawn(sweep.axes, sweep.zips, sweep.n, sweep.seed, where)
        else:
            combos = kept(grid(sweep.axes, sweep.zips), None if late else where)
        points = [p for p in (resolve(sweep.base, sweep.mode, c, sets, folder, front_by, late)
                              for c in combos) if p is not None]
    except WhereError as e:
        raise SweepError(f"{sweep.path}: where: {shown(sweep.where)}: {e}") from None
    if sweep.method == "random" and late is not None:
        points = _sampled(sweep, points)
    devices = {p.device for p in points if isinstance(p, Point)}
    if devices:  # none: nothing to run, said by the caller
        check_prices(sweep, devices)
    return SweepPlan(sweep, folder, tuple(points), sets, front_by)


def _sampled(sweep: SweepFile, points: list) -> list:
    assert sweep.n is not None  # load_sweep: random takes n
    return sample(points, sweep.n, sweep.seed)


def execute(the_plan: SweepPlan, executor: Executor, fresh: bool = False,
            progress: Optional[Progress] = None, task: Task = run_point) -> List[Dict]:
    """Every point's row, in the grid's order, each point run by `task` on `executor`. A
    point whose folder holds a complete result is not run again unless `fresh`; a point
    that fails is recorded and the others go on."""
    fan = Fan(executor, task, fresh, progress, len(the_plan.unique))
    results: Dict[str, Tuple[Dict, bool]] = {}
    try:
        for point in the_plan.unique:
            fan.start(point)
        while fan.busy:
            for point, result, skipped in fan.ended():
                results[point.key] = result, skipped
    finally:  # on a signal: no point not yet started starts
        fan.cancel()
    ran = [results.get(p.key, (None, False)) if isinstance(p, Point) else (None, False)
           for p in the_plan.points]
    return [row(p, result, the_plan.folder, skipped)
            for p, (result, skipped) in zip(the_plan.points, ran)]


class Fan:
    """Points started one at a time on `executor`, each run by `task(point, *args)`, and
    their results taken as they end: a point whose folder holds a complete result ends at
    once, skipped, unless `fresh`; one whose process dies, or whose folder the driver
    cannot see, is failed. The counts (done, skipped, failed, left of `planned`) go to
    `progress` as points end."""

    def __init__(self, executor: Executor, task: Callable[..., Dict], fresh: bool = False,
                 progress: Optional[Progress] = None, planned: int = 0, args: tuple = ()):
        self.executor, self.task, self.args, self.fresh = executor, task, args, fresh
        self.progress = progress
        self.counts = dict(done=0, skipped=0, failed=0, left=planned)
        self.running: Dict[Future, Point] = {}
        self._ended: List[Tuple[Point, Dict, bool]] = []

    @property
    def busy(self) -> bool:
        """Some point started and not yet taken by ended()."""
        return bool(self.running or self._ended)

    def start(self, point: Point) -> None:
        done = None if self.fresh else marker.read(point.folder)
        if done is not None:
            self._end(point, done, True)
        else:
            self.running[self.executor.submit(self.task, point, *self.args)] = point

    def ended(self) -> List[Tuple[Point, Dict, bool]]:
        """(point, result, skipped) of each point ended since the last call, waiting for
        one to end if none has."""
        if not self._ended and self.running:
            finished, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for future in finished:
                point = self.running.pop(future)
                self._end(point, _result(future, point), False)
        ended, self._ended = self._ended, []
        return ended

    def cancel(self) -> None:
        """No point started and not yet running starts."""
        for future in self.running:
            future.cancel()

    def _end(self, point: Point, result: Dict, skipped: bool) -> None:
        self._ended.append((point, result, skipped))
        what = "skipped" if skipped else "done" if result["status"] == "done" else "failed"
        self.counts[what] += 1
        self.counts["left"] -= 1
        if self.progress is not None:
            self.progress(dict(self.counts))


def _result(future: Future, point: Point) -> Dict:
    try:
        result = future.result()
    except Exception as e:  # noqa: BLE001 - the point's process died (a broken pool)
        return dict(empty_answer(), status="failed",
                    reason=f"the point's process ended: {type(e).__name__}: {e}")
    if result["status"] == "done" and marker.read(point.folder) is None:
        return dict(empty_answer(), status="failed", reason=_NOT_SEEN.format(
            folder=point.folder, marker=marker.MARKER))
    return result


