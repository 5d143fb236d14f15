"""`search: {method: pd_ratio}`: the P/D planner's shortcut over the prefill:decode
instance ratio (docs/sweeps.md, "The P/D ratio search"). For each point of the grid (a P/D
deployment: its pools' instance shapes, device, batch caps), each pool's capacity is
measured alone, the ratio that balances them computed, and only the xPyD deployments near
that ratio searched end to end. Every measurement is a capacity point of the sweep (its
own folder, named by its hash, resumed as any point), run by the same task and executor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from ...workload import Workload, load_workload
from .answer import empty_answer
from .counter import Counter
from .execute import Progress, SweepPlan, Task, execute
from .pd_ratio_keys import DECODE, PREFILL
from .point import Point, Refused, resolve
from .table import row

FIRST_PREFILL = 4  # prefill instances in front of the decode pool's first measurement
LIGHT = 0.5  # of its own capacity, the most a prefill instance there may carry
ROUNDS = 3  # decode measurements, each with more prefill instances, at most
# The one outcome whose rate is a capacity to balance: `at_least` (the target met up to the
# search's highest rate) is a bound, the others no answer.
ANSWERED = "capacity"
COLUMNS = ("pd_prefill_rate", "pd_decode_rate", "pd_balanced_ratio", "pd_estimated_rate")


@dataclass(frozen=True)
class Balance:
    """Each pool's capacity alone, req/s per instance, on the same requests."""

    prefill_rate: float  # one prefill instance, one output token a request, TTFT limit alone
    decode_rate: float  # one decode instance, prefill instances to spare, the whole SLO

    @property
    def ratio(self) -> float:
        """Prefill instances per decode instance at which the pools' capacities match."""
        return self.decode_rate / self.prefill_rate

    def estimate(self, prefill: int, decode: int) -> float:
        """xPyD's capacity if each pool ran at its capacity alone: the smaller pool's."""
        return min(prefill * self.prefill_rate, decode * self.decode_rate)

    def near(self, n: int, most: int) -> List[Tuple[int, int]]:
        """The (prefill, decode) instance counts to search: the fewer pool one instance, the
        other the balancing count rounded, and `n` counts either side of it, from 1 to
        `most`."""
        if self.ratio >= 1:
            return [(x, 1) for x in _around(self.ratio, n, most)]
        return [(1, y) for y in _around(1 / self.ratio, n, most)]

    def columns(self, prefill: Optional[int] = None, decode: Optional[int] = None) -> Dict:
        estimate = None if prefill is None or decode is None else \
            self.estimate(prefill, decode)
        return dict(zip(COLUMNS, (self.prefill_rate, self.decode_rate, self.ratio, estimate)))


def _around(value: float, n: int, most: int) -> range:
    centre = math.floor(value + 0.5)
    return range(max(1, centre - n), min(most, centre + n) + 1)


def refusal(workload: Workload) -> str:
    """Why the search cannot measure a resolved point's pools; "" when it can."""
    if workload.deployment.prefill is None or workload.deployment.decode is None:
        return ("deployment: the P/D ratio search measures a prefill and a decode pool: "
                "expected deployment.prefill and deployment.decode (docs/disaggregation.md)")
    if workload.trace.generate is None:
        return ("trace: the prefill pool is measured on the trace's prompts with one output "
                "token each: expected a generated trace (trace.generate)")
    if workload.slo.ttft is None:
        return "slo.ttft: the prefill pool is measured under the TTFT limit: expected one"
    return ""


def checked(the_plan: SweepPlan) -> SweepPlan:
    """The plan with every point whose pools cannot be measured refused, with the reason."""
    def judged(p):
        if not isinstance(p, Point):
            return p
        reason = refusal(load_workload(p.workload, p.overrides))
        return Refused(p.axes, f"search.method pd_ratio: {reason}") if reason else p
    return replace(the_plan, points=tuple(judged(p) for p in the_plan.points))


def planned(the_plan: SweepPlan) -> int:
    """Points the search runs if no decode measurement is run again: the measurements and
    the ratios searched, no more than `most` (the progress bar's total)."""
    sweep = the_plan.sweep
    return len(the_plan.unique) * (2 + min(2 * sweep.near + 1, sweep.most))


Measured = Dict[str, Any]  # a configuration's key -> its rate (req/s), or why there is none


def search(the_plan: SweepPlan, executor, task: Task, fresh: bool = False,
           progress: Optional[Progress] = None) -> List[Dict]:
    """The rows of the xPyD deployments searched near each point's balance, in the grid's
    order, each with the balance beside it; a point whose pools could not be measured is
    one failed row, with the reason."""
    counter = Counter(planned(the_plan), progress)
    configs = the_plan.unique
    prefill = _rates(the_plan, {c.key: _derived(the_plan, c, _prefill_alone(c))
                                for c in configs}, "the prefill pool alone", executor, task,
                     fresh, counter)
    decode = _decode_rates(the_plan, configs, prefill, executor, task, fresh, counter)
    balances = {c.key: Balance(prefill[c.key], decode[c.key]) for c in configs
                if not isinstance(decode[c.key], str)}
    pairs = _pairs(the_plan.sweep, balances, decode)
    todo = [(c.key, x, y, _derived(the_plan, c, {PREFILL: x, DECODE: y}))
            for c in configs if c.key in pairs for x, y in pairs[c.key]]
    ran = _run(the_plan, [p for *_, p in todo], executor, task, fresh, counter)
    searched: Dict[str, List[Dict]] = {}
    for (key, x, y, _), r in zip(todo, ran):
        searched.setdefault(key, []).append(dict(r, **balances[key].columns(x, y)))
    counter.finish()
    return _rows(the_plan, searched, prefill, decode)


def _pairs(sweep, balances: Dict[str, Balance], decode: Measured) -> Dict[str, list]:
    """Each balanced point's instance counts to search; a point whose balance asks for
    more than `most` instances has none, and the reason in `decode`."""
    pairs = {}
    for key, balance in balances.items():
        pairs[key] = balance.near(sweep.near, sweep.most)
        if not pairs[key]:
            del pairs[key]
            decode[key] = (f"the balance, {balance.ratio:.4g} prefill instances per decode "
                           f"instance, asks for more than search.most ({sweep.most}) of one "
                           f"pool's (prefill {balance.prefill_rate:.4g} req/s an instance, "
                           f"decode {balance.decode_rate:.4g})")
    return pairs


def _rows(the_plan: SweepPlan, searched: Dict[str, List[Dict]], prefill: Measured,
          decode: Measured) -> List[Dict]:
    """In the grid's order: a point's searched deployments, or its one failed row (its
    pools not measured), or its refused row."""
    rows: List[Dict] = []
    for p in the_plan.points:
        if isinstance(p, Point) and p.key in searched:
            rows += searched[p.key]
        elif isinstance(p, Point):
            reason = prefill[p.key] if isinstance(prefill[p.key], str) else decode[p.key]
            rows.append(row(p, dict(empty_answer(), status="failed",
                                    reason=f"search.method pd_ratio: {reason}"),
                            the_plan.folder))
        else:
            rows.append(row(p, None, the_plan.folder))
    return rows


def _prefill_alone(config: Point) -> Dict[str, Any]:
    """One prefill instance; one output token a request, so that the decode pool has
    nothing to decode; the TTFT limit alone."""
    ttft = load_workload(config.workload, config.overrides).slo.ttft
    return {PREFILL: 1, DECODE: 1, "trace.generate.output": {"fixed": 1},
            "slo": {"ttft": ttft}}


def _decode_rates(the_plan: SweepPlan, configs: List[Point], prefill: Measured, executor,
                  task: Task, fresh: bool, counter: Counter) -> Measured:
    """Each decode pool's capacity alone: one decode instance behind prefill instances
    enough that each carries at most LIGHT of its own capacity at the answer, measured
    again with more of them (sized for LIGHT / 2) while it is not so."""
    found: Measured = {c.key: prefill[c.key] for c in configs if isinstance(prefill[c.key], str)}
    instances = {c.key: FIRST_PREFILL for c in configs if c.key not in found}
    for _ in range(ROUNDS):
        if not instances:
            break
        rates = _rates(the_plan, {c.key: _derived(the_plan, c, {PREFILL: instances[c.key],
                                                                 DECODE: 1})
                                  for c in configs if c.key in instances},
                       "the decode pool alone", executor, task, fresh, counter)
        again = {}
        for key, rate in rates.items():
            alone = prefill[key]
            if isinstance(rate, str) or rate <= LIGHT * instances[key] * alone:
                found[key] = rate
            else:
                again[key] = math.ceil(2 * rate / (LIGHT * alone))
        instances = again
    for key, k in instances.items():
        found[key] = (f"the decode pool alone: its prefill instances carried more than "
                      f"{LIGHT:.0%} of their capacity in {ROUNDS} measurements (the next "
                      f"with {k})")
    return found


def _rates(the_plan: SweepPlan, points: Dict[str, Any], what: str, executor, task: Task,
           fresh: bool, counter: Counter) -> Measured:
    keys = list(points)
    rows = _run(the_plan, [points[k] for k in keys], executor, task, fresh, counter)
    return {key: _rate(r, what) for key, r in zip(keys, rows)}


def _rate(r: Dict, what: str) -> Any:
    if r["status"] != "done":
        return f"{what}: {r['status']}: {r['reason']}"
    if r["outcome"] != ANSWERED:
        return f"{what}: no capacity (outcome {r['outcome']}; its search: {r['run_dir']})"
    return float(r["rate"])


def _derived(the_plan: SweepPlan, config: Point, extra: Dict[str, Any]):
    """The point `config` with `extra` key paths set after its axes: a Point, or Refused."""
    return resolve(the_plan.sweep.base, "capacity", dict(config.axes, **extra),
                   the_plan.sets, the_plan.folder, the_plan.front_by)


def _run(the_plan: SweepPlan, points: list, executor, task: Task, fresh: bool,
         counter: Counter) -> List[Dict]:
    return execute(replace(the_plan, points=tuple(points)), executor, fresh,
                   counter.stage(), task)
