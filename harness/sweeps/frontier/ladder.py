"""Each kept deployment run over a ladder of closed-loop concurrencies (docs/frontier.md,
"The ladder"): one more row on every decode rank a rung (1, 2, 4, ... sequences a rank, up
to its batch cap), until a rung's steady window misses the SLO. The rungs run in waves,
the i-th rung of every deployment still climbing together, each a point of the sweep (its
own folder, resumed as any point), so the host's pool and a Ray cluster run the same
points."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional

from ...analysis.runs import read_run
from ...analysis.steady_state import SteadyState, of_run
from ..points.counter import Counter
from ..points.execute import Plan, Task, execute
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


def climb(the_plan: Plan, deployments: List[Deployment], options: FrontierOptions,
          slo: Dict[str, Optional[float]], executor, task: Task, fresh: bool,
          counter: Counter) -> List[Rung]:
    """Every rung run, wave by wave, in the deployments' order then the ladder's, until
    the steady window misses a limit of `slo` (the base's)."""
    ladders = {id(d): batches(d.cap) for d in deployments}
    climbing = list(deployments)
    rungs: List[Rung] = []
    step = 0
    while climbing:
        wave = [_rung(the_plan, d, ladders[id(d)][step], options) for d in climbing]
        runnable = [r for r in wave if isinstance(r.point, Point)]
        rows = execute(replace(the_plan, points=tuple(r.point for r in runnable)), executor,
                       fresh, counter.stage(), task)
        ran = {id(r): x for r, x in zip(runnable, rows)}
        step += 1
        next_climbing = []
        for r in wave:
            r = _ended(the_plan, r, ran.get(id(r)), slo)
            if not r.stop and step == len(ladders[id(r.deployment)]):
                r = replace(r, stop=f"the batch cap, {r.deployment.cap} sequences a rank: "
                                    f"the SLO held on every steady rung")
            rungs.append(r)
            if not r.stop:
                next_climbing.append(r.deployment)
        climbing = next_climbing
    return rungs


def _rung(the_plan: Plan, d: Deployment, batch: int, options: FrontierOptions) -> Rung:
    concurrency = d.ranks * batch
    requests = min(options.requests, max(MIN_REQUESTS, options.rounds * concurrency))
    axes = dict(d.axes, **{"load.mode": "concurrency", "load.concurrency": concurrency,
                           "trace.generate.requests": requests})
    point = resolve(the_plan.sweep.base, "run", axes, the_plan.sets, the_plan.folder,
                    the_plan.front_by)
    return Rung(d, batch, concurrency, requests, point, {}, SteadyState(False, "not run"))


def _ended(the_plan: Plan, r: Rung, result: Optional[Dict],
           slo: Dict[str, Optional[float]]) -> Rung:
    """The rung with its row and steady state, and why the ladder stops there, if it does."""
    if isinstance(r.point, Refused):
        return replace(r, row=row(r.point, None, the_plan.folder),
                       stop=f"refused: {r.point.reason}")
    assert result is not None
    if result["status"] != "done":
        return replace(r, row=result, stop=f"{result['status']}: {result['reason']}")
    steady = _steady(result["run_dir"])
    return replace(r, row=result, steady=steady, stop=_missed(steady, slo))


def _missed(steady: SteadyState, slo: Dict[str, Optional[float]]) -> str:
    """Which SLO limit the steady window's requests miss at p90 ('' where none): a closed
    loop's first wave arrives at once and queues for its prefill, so the whole run's
    attainment would stop every ladder early."""
    for name, limit, value in (("ttft", slo.get("ttft"), steady.ttft_p90_s),
                               ("tpot", slo.get("tpot"), steady.tpot_p90_s)):
        if steady.found and limit is not None and not value <= limit:
            return (f"the SLO: {name.upper()} p90 over the steady window {value:.3g} s, "
                    f"over its {limit:g} s")
    return ""


def _steady(run_dir: str) -> SteadyState:
    try:
        return of_run(read_run(Path(run_dir)))
    except Exception as e:  # noqa: BLE001 - a run whose tables cannot be read has no window
        return SteadyState(False, f"its tables could not be read: {type(e).__name__}: {e}")

