"""Expert parallelism on the real engine: the routed experts sharded over the EP group, each
token sent to the ranks of its experts by an all-to-all and their outputs sent back.

Placement: the E routed experts plus `redundant_experts` R fill E + R slots, slot p holding
expert p mod E (so the replicas are of experts 0..R-1); rank r holds slots r S .. r S + S - 1,
S = (E + R) / ep. A token goes to a replica on its own rank where there is one, else to
replica (its rank mod copies): a static placement, since the real engine has no load
statistics to balance by (EPLB's job).

Per MoE layer and micro-batch, every rank (one with no tokens too) runs, in order:
the counts exchange (rows for each rank; blocking: the split sizes must be on the host),
the dispatch of the rows (a token once per destination rank, DeepEP's normal mode) and
of their metadata (each row's local expert slots and top-k weights), then, once its experts
have run, the combine: one row back per row received, the weighted sum of its experts there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
import torch.distributed as dist

from .deployment import Deployment, DeploymentError
from .ep_comm import Comm, Pending, decode, encode
from .model_config import ModelConfig
from .step_parts import PartTimer

PAYLOADS = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn, "int8": torch.int8}


@dataclass(frozen=True)
class ExpertPlacement:
    n_experts: int
    redundant: int
    ep: int
    rank: int

    @property
    def slots_per_rank(self) -> int:
        return (self.n_experts + self.redundant) // self.ep

    def experts_of(self, rank: int) -> List[int]:
        s = self.slots_per_rank
        return [p % self.n_experts for p in range(rank * s, (rank + 1) * s)]

    @property
    def local_experts(self) -> List[int]:
        """The logical expert of each of this rank's slots."""
        return self.experts_of(self.rank)

    def routes(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(rank, slot on that rank) that this rank sends each logical expert's tokens to."""
        to_rank, to_slot = [], []
        for e in range(self.n_experts):
            holders = [(r, self.experts_of(r).index(e)) for r in range(self.ep)
                       if e in self.experts_of(r)]
            own = [h for h in holders if h[0] == self.rank]
            r, slot = own[0] if own else holders[self.rank % len(holders)]
            to_rank.append(r)
            to_slot.append(slot)
        return torch.tensor(to_rank), torch.tensor(to_slot)


@dataclass
class DispatchPlan:
    """A micro-batch's rows to send, ordered by destination rank then token."""

    tokens: torch.Tensor  # [N] the token each row carries
    counts: List[int]  # rows sent to each rank (the all-to-all's input split sizes)
    slots: torch.Tensor  # [N, k] the destination's local slot of each top-k expert, -1: not there
    weights: torch.Tensor  # [N, k] the top-k weights, 0 where not there


def plan_dispatch(experts: torch.Tensor, weights: torch.Tensor, to_rank: torch.Tensor,
                  to_slot: torch.Tensor, ep: int) -> DispatchPlan:
    """One row per (token, rank holding one of its top-k experts)."""
    dest, slot = to_rank[experts], to_slot[experts]  # [T, k]
    hit = torch.zeros(experts.shape[0], ep, dtype=torch.bool, device=experts.device)
    hit[torch.arange(experts.shape[0], device=experts.device)[:, None], dest] = True
    rank, tokens = hit.T.nonzero(as_tuple=True)
    there = dest[tokens] == rank[:, None]
    return DispatchPlan(tokens=tokens, counts=hit.sum(0).tolist(),
                        slots=torch.where(there, slot[tokens], -1),
                        weights=torch.where(there, weights[tokens], 0))


@dataclass
class Received:
    """What a rank's experts work on: rows from every rank, and how to send results back."""

    rows: torch.Tensor  # [M, H] in the activations' dtype
    slots: torch.Tensor  # [M, k] local slots, -1: another rank's
    weights: torch.Tensor  # [M, k]
    counts: List[int]  # rows from each rank


class EPGroup:
    """This rank's place in the EP group: its experts, the exchanges, the payloads."""

    def __init__(self, group: dist.ProcessGroup, placement: ExpertPlacement,
                 device: torch.device, timer: PartTimer, micro_batches: int = 1,
                 dispatch: Optional[torch.dtype] = None,
                 combine: Optional[torch.dtype] = None) -> None:
        self.placement, self.micro_batches = placement, micro_batches
        self.comm = Comm(group, device, timer)
        self.wire = {"dispatch": dispatch, "combine": combine}
        to_rank, to_slot = placement.routes()
        self.to_rank, self.to_slot = to_rank.to(device), to_slot.to(device)

    def plan(self, experts: torch.Tensor, weights: torch.Tensor) -> DispatchPlan:
        return plan_dispatch(experts, weights, self.to_rank, self.to_slot, self.placement.ep)

    def dispatch(self, x: torch.Tensor, plan: DispatchPlan) -> Tuple[Pending, Callable[[], Received]]:
        """Issue the dispatch; returns the exchange in flight and what reads it once done."""
        recv = self.comm.counts(plan.counts)
        data, scale = encode(x[plan.tokens], self.wire["dispatch"])
        meta_dtype = torch.promote_types(x.dtype, torch.float32)
        meta = torch.cat([plan.slots.to(meta_dtype), plan.weights.to(meta_dtype)]
                         + ([scale.to(meta_dtype)] if scale is not None else []), -1)
        rows = data.new_empty((sum(recv), data.shape[1]))
        rmeta = meta.new_empty((sum(recv), meta.shape[1]))
        pending = self.comm.exchange("dispatch", rows, data, recv, plan.counts) \
            + self.comm.exchange("dispatch", rmeta, meta, recv, plan.counts)
        k = plan.slots.shape[1]

        def received() -> Received:
            rscale = rmeta[:, 2 * k:] if scale is not None else None
            return Received(decode(rows, rscale, self.wire["dispatch"], x.dtype),
                            rmeta[:, :k].long(), rmeta[:, k:2 * k].to(x.dtype), recv)
        return pending, received

    def combine(self, y: torch.Tensor, received: Received,
                plan: DispatchPlan) -> Tuple[Pending, Callable[[], torch.Tensor]]:
        """Send each received row's weighted expert sum back to its rank."""
        data, scale = encode(y, self.wire["combine"])
        back = data.new_empty((len(plan.tokens), data.shape[1]))
        pending = self.comm.exchange("combine", back, data, plan.counts, received.counts)
        back_scale = None
        if scale is not None:
            back_scale = scale.new_empty((len(plan.tokens), 1))
            pending += self.comm.exchange("combine", back_scale, scale, plan.counts,
                                          received.counts)

        def returned() -> torch.Tensor:
            return decode(back, back_scale, self.wire["combine"], y.dtype)
        return pending, returned


def check_real(d: Deployment, model: ModelConfig, world_size: int, device: torch.device) -> None:
    """DeploymentError, by key, for what the real engine does not run (yet)."""
    for key, degree, what in ((("attention", "tp"), d.attention_tp, "TP attention"),
                              (("moe", "tp"), d.moe_tp, "MoE TP"),
                              (("dense", "tp"), d.dense_tp, "dense TP")):
        if degree > 1:
            raise DeploymentError(key, f"{what} is not built on the real engine (torch "
                                  f"executor); expected 1, got {degree}")
    if d.moe_ep > 1 and d.moe_ep != world_size:
        raise DeploymentError(("moe", "ep"), f"the real engine runs EP over all its "
                              f"{world_size} ranks; expected 1 or {world_size}, got {d.moe_ep}")
    experts = model.n_routed_experts
    if d.moe_ep > experts or (experts + d.redundant_experts) % d.moe_ep:
        raise DeploymentError(("moe", "ep"), f"must divide {model.name}'s routed experts plus "
                              f"the redundant ones ({experts} + {d.redundant_experts}), at "
                              f"most {experts}; got {d.moe_ep}")
    for part in ("dispatch", "combine"):
        if device.type != "cpu" and d.precision[part] not in PAYLOADS:
            raise DeploymentError(("precision", part), f"{d.precision[part]} payloads are not "
                                  f"built on the real engine; expected one of "
                                  f"{', '.join(PAYLOADS)}")


def payload(precision: str, device: torch.device,
            activations: torch.dtype) -> Optional[torch.dtype]:
    """The wire format of a dispatch or combine: None (the activations' own dtype) on the
    CPU, where runs are checked token for token against one process; elsewhere the
    deployment's, where it is narrower than the activations."""
    if device.type == "cpu":
        return None
    wire = PAYLOADS[precision]
    return wire if wire.itemsize < activations.itemsize else None


def attach(model, deployment: Optional[Deployment], rank: int, world_size: int,
           group: Optional[dist.ProcessGroup] = None) -> None:
    """Shard `model` (a DeepSeekModel) over an EP group of every rank of `group` (None: a
    new group of every process; new_group is collective: every process calls it) where the
    deployment asks for EP; after init_process_group. `rank`: this one's in the group."""
    if deployment is None or deployment.moe_ep == 1:
        return
    device = model.lm_head.weight.device
    dtype = model.lm_head.weight.dtype
    check_real(deployment, model.cfg, world_size, device)
    if group is None:
        group = dist.new_group(list(range(world_size)))
    placement = ExpertPlacement(model.cfg.n_routed_experts, deployment.redundant_experts,
                                deployment.moe_ep, rank)
    model.use_ep(EPGroup(group, placement, device, model.timer, deployment.micro_batches,
                         payload(deployment.precision["dispatch"], device, dtype),
                         payload(deployment.precision["combine"], device, dtype)))
