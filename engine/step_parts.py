"""The time of each part of one rank's forward, measured around the real calls: the parts
the modeled steps table has (docs/modeling.md, "The step"), in ns.

- attention: every layer's attention (its norm, projections, cache write and attend);
- dense: dense FFN layers, the routers and the shared experts;
- experts: the routed experts this rank holds, on the tokens it received;
- dispatch, combine: the EP all-to-alls (engine/ep_comm.py times them), from issue to
  completion, so with two micro-batches they overlap the compute parts.

On the CPU a part is perf_counter_ns around its calls; on CUDA or an NPU a pair of the
device's timing events on the current stream, read once the step has synchronised. The LM
head, sampling and the MTP bookkeeping are outside every part (forward_ns holds them).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Dict, Iterator, List, Tuple

import torch

PARTS = ("attention", "dense", "experts", "dispatch", "combine")


class PartTimer:
    """One step's parts; start() before the forward, collect() once it has synchronised."""

    def __init__(self) -> None:
        self.ns: Dict[str, int] = dict.fromkeys(PARTS, 0)
        self._events: List[Tuple[str, object, object]] = []
        self._accel = None  # torch.cuda or torch.npu when the forward runs on one

    def start(self, device: torch.device) -> None:
        self.ns = dict.fromkeys(PARTS, 0)
        self._events = []
        self._accel = getattr(torch, device.type) if device.type in ("cuda", "npu") else None

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        if self._accel is None:
            begin = time.perf_counter_ns()
            yield
            self.ns[name] += time.perf_counter_ns() - begin
            return
        begin_event = self._accel.Event(enable_timing=True)
        end_event = self._accel.Event(enable_timing=True)
        begin_event.record()
        yield
        end_event.record()
        self._events.append((name, begin_event, end_event))

    def add(self, name: str, ns: int) -> None:
        self.ns[name] += ns

    def collect(self) -> Dict[str, int]:
        """Every part's ns this step (events are waited for)."""
        for name, begin, end in self._events:
            end.synchronize()  # type: ignore[attr-defined]
            self.ns[name] += int(begin.elapsed_time(end) * 1e6)  # type: ignore[attr-defined]
        self._events = []
        return dict(self.ns)
