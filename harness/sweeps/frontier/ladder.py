"""Each kept deployment run over a ladder of closed-loop concurrencies (docs/frontier.md,
"The ladder"): one more row on every decode rank a rung (1, 2, 4, ... sequences a rank, up
to its batch cap), until a rung's steady window misses the SLO. Each rung is a point of
the sweep (its own folder, resumed as any point), so the host's pool and a Ray cluster run
the same points; a ladder's next rung starts as soon as its last has ended, its steady
window read where it ran."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional

from ...analysis.steady_state import SteadyState, of_run
from ...record.run import Run
from ...workload.views import SloKeys
from ..points.counter import Counter
from ..points.execute import Fan, SweepPlan, Task
from ..points.point import Point, Refused, resolve
from ..points.table import row
from .deployments import Deployment
from .estimate import batches
from .options import FrontierOptions

MIN_REQUESTS = 64  # a rung's requests at least: fewer leave no steady window to read


@dataclass(frozen=True)
class Rung:
    """One run of a deployment's ladder: its point (or why it could not be one), its sweep
    row, its steady state, and why the ladder stopped there ('' while it climbs)."""

    deployment: Deployment
    batch: int  # sequences a decode rank
    concurrency: int
    requests: int
    point: Any  # Point or Refused
    row: Dict[str, Any]
    steady: SteadyState
    stop: str = ""


def climb(the_plan: SweepPlan, deployments: List[Deployment], options: FrontierOptions,
          slo: SloKeys, executor, task: Task, fresh: bool,
          counter: Counter, workers: int) -> List[Rung]:
    """Every rung run, in the deployments' order then the ladder's, until the steady window
    misses a limit of `slo` (the base's). The rung of the highest concurrency starts
    first (the largest deployments' top rungs are the search's longest runs: started last,
    they would run alone at its end), with one queued behind each of the `workers` running,
    so that no worker waits for the driver to read a rung's end."""
    ladders = {id(d): batches(d.cap) for d in deployments}
    climbed: Dict[int, List[Rung]] = {id(d): [] for d in deployments}
    ready = [_rung(the_plan, d, ladders[id(d)][0], options) for d in deployments]
    running: Dict[int, Rung] = {}  # by id(point)

    def settle(r: Rung, result: Optional[Dict], skipped: bool = False) -> None:
        ladder, done = ladders[id(r.deployment)], climbed[id(r.deployment)]
        r = _ended(the_plan, r, result, skipped, slo)
        if not r.stop and len(done) + 1 == len(ladder):
            r = replace(r, stop=f"the batch cap, {r.deployment.cap} sequences a rank: "
                                f"the SLO held on every steady rung")
        done.append(r)
        if not r.stop:
            ready.append(_rung(the_plan, r.deployment, ladder[len(done)], options))

    fan = Fan(executor, measured, fresh, counter.stage(), counter.total, args=(task,))
    try:
        while ready or fan.busy:
            while ready and len(fan.running) < 2 * workers:
                r = ready.pop(max(range(len(ready)), key=lambda i: (ready[i].concurrency, -i)))
                if isinstance(r.point, Point):
                    running[id(r.point)] = r
                    fan.start(r.point)
                else:
                    settle(r, None)
            for point, result, skipped in fan.ended():
                settle(running.pop(id(point)), result, skipped)
    finally:  # on a signal: no rung not yet started starts
        fan.cancel()
    return [r for d in deployments for r in climbed[id(d)]]


def measured(point: Point, task: Task) -> Dict:
    """`task`'s result of a rung's point, with its run's steady state read where it ran."""
    result = task(point)
    if result["status"] == "done":
        result = dict(result, steady=_steady(result["run_dir"]))
    return result


def _rung(the_plan: SweepPlan, d: Deployment, batch: int, options: FrontierOptions) -> Rung:
    concurrency = d.ranks * batch
    requests = min(options.requests, max(MIN_REQUESTS, options.rounds * concurrency))
    axes = dict(d.axes, **{"load.mode": "concurrency", "load.concurrency": concurrency,
                           "trace.generate.requests": requests})
    point = resolve(the_plan.sweep.base, "run", axes, the_plan.sets, the_plan.folder,
                    the_plan.front_by)
    return Rung(d, batch, concurrency, requests, point, {}, SteadyState(False, "not run"))


def _ended(the_plan: SweepPlan, r: Rung, result: Optional[Dict], skipped: bool,
           slo: SloKeys) -> Rung:
    """The rung with its row and steady state, and why the ladder stops there, if it does."""
    if isinstance(r.point, Refused):
        return replace(r, row=row(r.point, None, the_plan.folder),
                       stop=f"refused: {r.point.reason}")
    assert result is not None
    ran = row(r.point, result, the_plan.folder, skipped)
    if result["status"] != "done":
        return replace(r, row=ran, stop=f"{result['status']}: {result['reason']}")
    steady = result.get("steady") or _steady(result["run_dir"])  # skipped: read here
    return replace(r, row=ran, steady=steady, stop=_missed(steady, slo))


def _missed(steady: SteadyState, slo: SloKeys) -> str:
    """Which SLO limit the steady window's requests miss at p90 ('' where none): a closed
    loop's first wave arrives at once and queues for its prefill, so the whole run's
    attainment would stop every ladder early."""
    for name, limit, value in (("ttft", slo.ttft, steady.ttft_p90_s),
                               ("tpot", slo.tpot, steady.tpot_p90_s)):
        if steady.found and limit is not None and not value <= limit:
            return (f"the SLO: {name.upper()} p90 over the steady window {value:.3g} s, "
                    f"over its {limit:g} s")
    return ""


def _steady(run_dir: str) -> SteadyState:
    try:
        return of_run(Run.read(Path(run_dir)))
    except Exception as e:  # noqa: BLE001 - a run whose tables cannot be read has no window
        return SteadyState(False, f"its tables could not be read: {type(e).__name__}: {e}")

