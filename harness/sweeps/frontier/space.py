"""The deployments a serving team would consider for one device (docs/frontier.md, "The
deployments"): co-located instances (DP attention with EP, or attention TP with EP where
the heads divide, under the vote or mixed batches) and prefill/decode-disaggregated ones
(a prefill worker beside a decode worker, their instance counts set later from the pools'
estimated rates), each with and without MTP. Each is a set of workload key paths; the
memory check is the workload's own (a deployment that does not fit is refused where the
point is resolved, with its reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

# Instance widths tried: powers of two, and the scale-up domain's own width (72 on an NVL72)
WIDTHS = (4, 8, 16, 32, 64, 128, 256)
TP_WIDTHS = (4, 8)  # attention TP: within a node, as TensorRT-LLM's TEP runs it
PREFILL_WIDTHS = (4, 8)  # prefill workers: DEP4/DEP8 and TP4/TP8 (InferenceX's shapes)


@dataclass(frozen=True)
class Shape:
    """One instance's layout: `devices` of them, attention DP or TP over them, EP over all."""

    devices: int
    tp: bool  # attention (and the dense layers) TP over the instance, else DP

    @property
    def name(self) -> str:
        return f"{'TEP' if self.tp else 'DEP'}{self.devices}"

    def values(self, experts: int) -> Dict[str, Any]:
        """The instance's `deployment:` keys (the redundant experts that make the routed
        experts divide by the EP width, as 288 do over 72 GPUs)."""
        n = self.devices
        attention = {"dp": 1, "tp": n} if self.tp else {"dp": n, "tp": 1}
        return {"devices": n, "attention": attention, "moe": {"ep": n, "tp": 1},
                "dense": {"tp": n if self.tp else 1}, "redundant_experts": -experts % n}


@dataclass(frozen=True)
class Candidate:
    """A deployment of the search: co-located (`prefill` None) or P/D; `sets` are the
    workload key paths it sets beside the device's own (`deployment.*` sections whole)."""

    label: str
    mtp: int
    decode: Shape
    prefill: Any = None  # a Shape for P/D
    mixed: bool = False  # co-located: mixed batches (chunked prefill) instead of the vote

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None


def widths(scaleup: int, most: int, experts: int) -> List[int]:
    """Instance widths up to `most` devices: the powers of two, and the scale-up domain's
    width, each at most the experts (one expert a device at least)."""
    out = {w for w in WIDTHS if w <= most}
    if scaleup <= most:
        out.add(scaleup)
    return sorted(w for w in out if w <= experts)


def candidates(scaleup: int, most: int, heads: int, experts: int,
               mtps: Tuple[int, ...], colocated: bool = True,
               disaggregated: bool = True) -> List[Candidate]:
    """Every deployment of the space for a device whose scale-up domain holds `scaleup`
    devices, instances of at most `most` devices, a model of `heads` attention heads and
    `experts` routed experts."""
    dep = [Shape(w, False) for w in widths(scaleup, most, experts)]
    tep = [Shape(w, True) for w in TP_WIDTHS
           if w <= min(scaleup, most) and heads % w == 0]
    out: List[Candidate] = []
    for mtp in mtps:
        suffix = f" MTP{mtp}" if mtp else ""
        if colocated:
            for shape in tep + dep:
                for mixed in (False, True):
                    out.append(Candidate(f"{shape.name} {'mixed' if mixed else 'vote'}{suffix}",
                                         mtp, shape, mixed=mixed))
        if disaggregated:
            prefills = [Shape(w, tp) for w in PREFILL_WIDTHS if w <= most
                        for tp in (False, True)
                        if not tp or (heads % w == 0 and w <= scaleup)]
            for p in prefills:
                for d in tep + dep:
                    out.append(Candidate(f"P {p.name} + D {d.name}{suffix}", mtp, d, p))
    return out
