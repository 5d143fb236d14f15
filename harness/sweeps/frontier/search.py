"""`search: {method: frontier}`: each device's own best deployments, found by search, and
the devices read against each other at equal interactivity (docs/frontier.md). Each grid
point is a device set up as its vendor serves the model (the sweep's axes: device,
precision, stack); the search generates its deployments, prunes them on their modeled
steps' estimates, runs each survivor's ladder of concurrencies, and reads the fronts.
Besides the sweep's table (a row a rung), its folder gets `frontier_points`,
`frontier_deployments` and `frontier_readings` tables and `frontier.md`."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import pandas as pd

from fileio.atomic import atomic_open

from ...record.table_reader import read_frame
from ...record.table_sink import write_table
from ...schema.frontier_tables import FRONTIER_READINGS, TABLE_NAMES
from ...workload import load_workload
from ...workload.schema import executor_spec
from ..points.counter import Counter
from ..points.execute import Progress, SweepPlan, Task
from ..points.point import Point
from ..points.sweep_file import SweepError
from . import answer
from .deployments import KEPT, Deployment, of_device
from .estimate import batches
from .ladder import climb
from .summary import markdown

SUMMARY = "frontier.md"


def deployments(the_plan: SweepPlan) -> List[Deployment]:
    """Every grid point's deployments, estimated and pruned; SweepError (exit 2) where a
    device is left without a deployment to run."""
    options = the_plan.sweep.frontier
    assert options is not None  # load_sweep: the frontier method has its options
    grid = [p for p in the_plan.points if isinstance(p, Point)]
    devices = list(dict.fromkeys(p.device for p in grid))
    if options.reference is not None and options.reference not in devices:
        raise SweepError(f"{the_plan.sweep.at(('search', 'reference'))}: expected one of the "
                         f"devices the points resolve to ({', '.join(devices)}), got "
                         f"{options.reference!r}")
    out: List[Deployment] = []
    for point in grid:
        spec = executor_spec(point.device)
        if spec is None or not spec.modeled:
            raise SweepError(f"{the_plan.sweep.path}: search.method frontier: {point.device}: "
                             f"the search estimates and runs each deployment on a modeled "
                             f"device's virtual clock: expected modeled:<profile>")
        theirs = of_device(the_plan, point, options)
        if not any(d.state == KEPT for d in theirs):
            raise SweepError(_empty(the_plan, point, theirs))
        out += theirs
    return out


def planned(deployments: List[Deployment]) -> int:
    """Rungs the search runs if every ladder climbs to its batch cap."""
    return sum(len(batches(d.cap)) for d in deployments if d.state == KEPT)


def search(the_plan: SweepPlan, deployments: List[Deployment], executor, task: Task,
           fresh: bool = False, progress: Optional[Progress] = None,
           workers: int = 1) -> List[Dict]:
    """The rungs' sweep rows, in the devices' order, then the deployments', then the
    ladders'; `workers` rungs run at once (the pool's, or the Ray cluster's CPUs). The
    frontier's tables written beside the sweep's."""
    options = the_plan.sweep.frontier
    assert options is not None
    kept = [d for d in deployments if d.state == KEPT]
    counter = Counter(planned(deployments), progress)
    slo = load_workload(the_plan.sweep.base, the_plan.sets).slo
    rungs = climb(the_plan, kept, options, slo, executor, task, fresh, counter, workers)
    counter.finish()
    points = answer.points_table(rungs, slo.ttft, the_plan.sweep.prices)
    reference = options.reference or kept[0].device
    readings = answer.readings_table(points, options.levels, reference)
    _write(the_plan.folder, points, answer.deployments_table(deployments), readings,
           markdown(points, readings, reference))
    return [r.row for r in rungs]


def answer_of(folder: Path) -> Dict:
    """What `sweep --json` says of the search: its tables, its readings, frontier.md."""
    readings = read_frame(folder / f"{FRONTIER_READINGS.name}.parquet")
    return dict(tables={name: str(folder / f"{name}.parquet") for name in TABLE_NAMES},
                summary=str(folder / SUMMARY), summary_text=(folder / SUMMARY).read_text(),
                readings=readings.astype(object).where(readings.notna(), None)
                .to_dict("records"))


def _empty(the_plan: SweepPlan, point: Point, theirs: List[Deployment]) -> str:
    said = "; ".join(f"{d.label}: {d.state}: {d.reason}" for d in theirs[:3])
    return (f"{the_plan.sweep.path}: search.method frontier: {point.device} is left without "
            f"a deployment to run ({len(theirs)} considered; {said}{' ...' if len(theirs) > 3 else ''})")


def _write(folder: Path, points: pd.DataFrame, deployments: pd.DataFrame,
           readings: pd.DataFrame, summary: str) -> None:
    for name, df in zip(TABLE_NAMES, (points, deployments, readings)):
        write_table(df, folder, name, "parquet")
    with atomic_open(folder / SUMMARY) as f:
        f.write(summary)
