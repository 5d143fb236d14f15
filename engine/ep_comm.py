"""The EP group's all-to-alls, timed, and their payloads at a precision.

An exchange is issued without waiting for it. On the CPU (gloo) it is async_op=True: gloo
runs it on its own threads while this one computes, and its end is taken when the work's
future completes. On CUDA or an NPU it is issued on a communication stream of its own
between two timing events; the compute stream waits for its end event only where it reads
the result. Either way a part's time is the exchange's, issue to completion, not the part
of it the compute did not hide.

Payloads: the activations' dtype, or a narrower one: BF16 / FP16 by a cast; FP8 (E4M3)
and INT8 scaled per row (amax over the row to the format's largest value), the scales sent
beside the rows, as DeepEP's FP8 dispatch sends its. Bytes travel as uint8 (gloo and
NCCL move bytes of any format).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist

from .step_parts import PartTimer

# wire formats that are scaled per row: their largest finite value
SCALED = {torch.float8_e4m3fn: 448.0, torch.int8: 127.0}


def encode(x: torch.Tensor, wire: Optional[torch.dtype]) -> Tuple[torch.Tensor,
                                                                  Optional[torch.Tensor]]:
    """x [N, H] as sent, and its per-row scales [N, 1] where the format is scaled."""
    if wire is None or wire == x.dtype:
        return x, None
    if wire not in SCALED:
        return x.to(wire), None
    scale = x.abs().amax(-1, keepdim=True).clamp(min=1e-12) / SCALED[wire]
    q = x / scale
    q = q.round().clamp(-127, 127) if wire == torch.int8 else q
    return q.to(wire).view(torch.uint8), scale


def decode(data: torch.Tensor, scale: Optional[torch.Tensor], wire: Optional[torch.dtype],
           dtype: torch.dtype) -> torch.Tensor:
    if wire is None or wire == dtype:
        return data
    if scale is None:
        return data.to(dtype)
    return data.view(wire).to(dtype) * scale.to(dtype)


@dataclass
class Pending:
    """Exchanges in flight: wait() before reading their outputs."""

    works: List[dist.Work] = field(default_factory=list)
    events: List[object] = field(default_factory=list)  # end events on the comm stream
    accel: Optional[object] = None

    def wait(self) -> None:
        for work in self.works:
            work.wait()
        for event in self.events:
            self.accel.current_stream().wait_event(event)  # type: ignore[attr-defined]

    def __add__(self, other: Pending) -> Pending:
        return Pending(self.works + other.works, self.events + other.events,
                       self.accel or other.accel)


class Comm:
    """all_to_all_single on one process group, each exchange's time added to a part."""

    def __init__(self, group: dist.ProcessGroup, device: torch.device, timer: PartTimer) -> None:
        self.group, self.device, self.timer = group, device, timer
        self.accel = getattr(torch, device.type) if device.type in ("cuda", "npu") else None
        self.stream = self.accel.Stream(device) if self.accel else None
        self._spans: List[Tuple[str, object, object]] = []

    def exchange(self, part: str, out: torch.Tensor, inp: torch.Tensor,
                 out_splits: List[int], in_splits: List[int]) -> Pending:
        if self.accel is None:
            begin = time.perf_counter_ns()
            work = dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group,
                                          async_op=True)
            assert work is not None, "async_op=True returns the work"
            done = work.get_future().then(lambda _: time.perf_counter_ns())
            self._spans.append((part, begin, done))
            return Pending(works=[work])
        accel, stream = self.accel, self.stream
        stream.wait_stream(accel.current_stream())  # type: ignore[union-attr]
        with accel.stream(stream):
            begin_event, end_event = (accel.Event(enable_timing=True) for _ in range(2))
            begin_event.record()
            dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)
            end_event.record()
        inp.record_stream(stream)  # type: ignore[arg-type]
        out.record_stream(stream)  # type: ignore[arg-type]
        self._spans.append((part, begin_event, end_event))
        return Pending(events=[end_event], accel=accel)

    def counts(self, send: List[int]) -> List[int]:
        """The rows every rank sends this one, for the rows this one sends each (a
        blocking exchange: the split sizes must be on the host), timed as dispatch."""
        device = self.device if self.accel is not None else torch.device("cpu")
        out = torch.empty(len(send), dtype=torch.int64, device=device)
        self.exchange("dispatch", out, torch.tensor(send, dtype=torch.int64, device=device),
                      [1] * len(send), [1] * len(send)).wait()
        return out.tolist()

    def collect(self) -> None:
        """Add every exchange of the step to the timer's parts."""
        for part, begin, end in self._spans:
            if self.accel is None:  # a future of the completion's perf_counter_ns
                self.timer.add(part, end.wait() - begin)  # type: ignore[attr-defined]
            else:
                end.synchronize()  # type: ignore[attr-defined]
                self.timer.add(part, int(begin.elapsed_time(end) * 1e6))  # type: ignore[attr-defined]
        self._spans = []
