"""One device's deployments for the frontier search, resolved and pruned (docs/frontier.md,
"The deployments", "Pruning"): every candidate of the space set on the device's grid point
(its precision, stack and the rest of its `deployment:` kept), refused where the workload's
memory check refuses it, estimated from its modeled step, and kept where its estimate comes
within the margin of the device's best estimate somewhere."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from engine.devices.profile import load_device_profile
from engine.model_config import load_model_config

from ...analysis import frontier
from ...schema.frontier_tables import STATES
from ...workload import Workload, load_workload
from ...workload.schema import executor_spec
from ...workload.trace import load_workload_trace
from ..points.execute import SweepPlan
from ..points.point import Point, Refused, resolve
from .estimate import Estimate, Lengths, colocated, disaggregated
from .options import FrontierOptions
from .space import Candidate, candidates

# The grid point's `deployment:` keys a candidate keeps: the device's software and numbers
OWN = ("precision", "stack", "cuda_graphs", "micro_batches", "expert_imbalance",
       "memory_utilization")
KEPT, PRUNED, REFUSED, FAILED = STATES
# The most a P/D deployment's prefill pool carries at its decode pool's full rate: its
# instances are counted for the decode pool's estimated rate over this, so that its queue,
# the TTFT, stays bounded at the top of the ladder (a pool near 100 % queues without end).
PREFILL_LOAD = 0.8


@dataclass(frozen=True)
class Deployment:
    """A candidate on one grid point: its axes (the grid's and the deployment's keys), the
    sequences in flight that fill one more row on every decode rank (`ranks`), each rank's
    batch cap, its estimate and what became of it."""

    device: str
    candidate: Candidate
    axes: Dict[str, Any]
    devices: int = 0
    ranks: int = 0
    cap: int = 0
    estimate: Optional[Estimate] = None
    counts: Tuple[int, int] = (1, 1)  # P/D: prefill and decode instances
    state: str = KEPT
    reason: str = ""
    score: float = math.nan  # its estimate's best y over the device's estimated front there

    @property
    def label(self) -> str:
        """The candidate's name; a P/D deployment's with its instance counts (xPyD)."""
        c = self.candidate
        if not c.disaggregated:
            return c.label
        (x, y), mtp = self.counts, f" MTP{c.mtp}" if c.mtp else ""
        return f"{x}P {c.prefill.name} + {y}D {c.decode.name}{mtp}"


def of_device(the_plan: SweepPlan, point: Point, options: FrontierOptions) -> List[Deployment]:
    """Every candidate of the device at `point`, kept, pruned, refused or failed."""
    workload = load_workload(point.workload, point.overrides)
    spec = executor_spec(workload.device)
    assert spec is not None and spec.profile is not None  # search.deployments: modeled
    profile = load_device_profile(spec.profile)
    model = load_model_config(workload.model)
    scaleup = int(profile.scaleup_devices.value)
    own = {k: _given(v) for k, v in workload.values["deployment"].items()
           if k in OWN and v is not None}
    lengths = _lengths(workload)
    acceptance = workload.mtp_acceptance or 0.0
    experts = model.n_routed_experts or 1
    return _pruned([_estimated(the_plan, point, c, own, scaleup, experts, lengths, acceptance)
                    for c in candidates(scaleup, options.most, model.num_attention_heads,
                                        experts, options.mtp, options.colocated,
                                        options.disaggregated)], options)


def _given(v: Any) -> Any:
    """A resolved value as a --set gives it: a mapping without its null (default) keys."""
    return {k: x for k, x in v.items() if x is not None} if isinstance(v, dict) else v


def _lengths(workload: Workload) -> Lengths:
    df = load_workload_trace(workload).df
    return Lengths(float(df["prompt_len"].mean()), float(df["max_new_tokens"].mean()))


def layout(c: Candidate, own: Dict[str, Any], experts: int, link: str = "",
           counts: Tuple[int, int] = (1, 1)) -> Dict[str, Any]:
    """The candidate's workload keys: its `deployment:` whole, its MTP, its batching."""
    if not c.disaggregated:
        return {"deployment": {**own, **c.decode.values(experts)}, "engine.num_mtp": c.mtp,
                "engine.mixed_batches": c.mixed}
    prefill, decode = counts
    return {"deployment": {
        "prefill": {"instances": prefill, **own, **c.prefill.values(experts)},
        "decode": {"instances": decode, **own, **c.decode.values(experts)},
        "kv_transfer": {"link": link}},
        "engine.num_mtp": c.mtp, "engine.overlap": False}


def _estimated(the_plan: SweepPlan, point: Point, c: Candidate, own: Dict[str, Any], scaleup: int,
               experts: int, lengths: Lengths, acceptance: float) -> Deployment:
    def resolved(axes):
        return resolve(the_plan.sweep.base, "run", axes, the_plan.sets, the_plan.folder,
                       the_plan.front_by)

    device = point.device
    axes = dict(point.axes, **layout(c, own, experts, "scaleup"))
    p = resolved(axes)
    if isinstance(p, Refused):
        return Deployment(device, c, axes, state=REFUSED, reason=p.reason)
    assert p is not None  # no `where` here
    try:
        workload = load_workload(p.workload, p.overrides)
        estimate, counts = _estimate(workload, c, lengths, acceptance)
    except Exception as e:  # noqa: BLE001 - a candidate the model cannot step is dropped, said
        return Deployment(device, c, axes, state=FAILED, reason=f"{type(e).__name__}: {e}")
    if c.disaggregated:  # its instance counts, and its KV link as the racks have it
        total = counts[0] * c.prefill.devices + counts[1] * c.decode.devices
        axes = dict(point.axes, **layout(c, own, experts,
                                         "scaleup" if total <= scaleup else "scaleout", counts))
        p = resolved(axes)
        if isinstance(p, Refused):
            return Deployment(device, c, axes, state=REFUSED, reason=p.reason)
        assert p is not None
        workload = load_workload(p.workload, p.overrides)
    return Deployment(device, c, axes, _devices(workload), _ranks(workload),
                      _cap(workload), estimate, counts)


def _estimate(workload: Workload, c: Candidate, lengths: Lengths, acceptance: float):
    service = workload.disaggregation
    if service is None:
        config = workload.engine_config("released")
        return colocated(config, workload.deployment.devices, lengths, acceptance), (1, 1)
    prefill, decode = service.pools
    estimate = disaggregated(workload.engine_config("released", prefill), prefill.devices,
                             workload.engine_config("released", decode), decode.devices,
                             lengths, acceptance)
    need = (estimate.prefill_per_decode or 1.0) / PREFILL_LOAD
    counts = (math.ceil(need), 1) if need >= 1 else (1, max(1, math.floor(1 / need)))
    return estimate, counts


def _devices(workload: Workload) -> int:
    service = workload.disaggregation
    return service.devices if service else workload.deployment.devices


def _ranks(workload: Workload) -> int:
    """Decode DP ranks of the deployment: one more sequence each fills one more row."""
    service = workload.disaggregation
    if service is None:
        return workload.engine_config("released").scheduler.dp_size
    decode = service.pools[1]
    return decode.instances * workload.engine_config("released", decode).scheduler.dp_size


def _cap(workload: Workload) -> int:
    service = workload.disaggregation
    config = workload.engine_config("released", service.pools[1] if service else None)
    return config.scheduler.max_num_seqs


def _pruned(deployments: List[Deployment], options: FrontierOptions) -> List[Deployment]:
    """The estimated ones scored against the device's estimated front; of those within
    `margin` of it, `keep` kept: first those owning the most of the front's points (so
    that every stretch of it has its deployment), then by score; the rest pruned, saying
    why."""
    estimated = [d for d in deployments if d.state == KEPT and d.estimate is not None]
    best = frontier.envelope(frontier.Point(x, y, d.label) for d in estimated
                             for x, y in d.estimate.points)  # type: ignore[union-attr]
    scored = {id(d): _score(d, best) for d in estimated}
    owned = Counter(p.label for p in best.points)
    ranked = sorted(estimated, key=lambda d: (-owned[d.label], -scored[id(d)]))
    kept = {id(d) for d in ranked[:options.keep] if scored[id(d)] >= 1 - options.margin}
    out = []
    for d in deployments:
        if d.state != KEPT:
            out.append(d)
            continue
        score = scored[id(d)]
        reason = "" if id(d) in kept else (
            f"estimated at {score:.0%} of the device's best estimate at best, under "
            f"1 - margin ({1 - options.margin:.0%})" if score < 1 - options.margin else
            f"within the margin, but {options.keep} deployments own more of the estimated "
            f"front or scored higher (keep)")
        out.append(replace(d, state=PRUNED if reason else KEPT, reason=reason, score=score))
    return out


def _score(d: Deployment, best: frontier.Front) -> float:
    assert d.estimate is not None  # a kept deployment is estimated
    ratios = [y / r.value for x, y in d.estimate.points
              if (r := frontier.read(best, x)).found and r.value > 0]
    return max(ratios, default=0.0)
