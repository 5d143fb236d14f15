"""Engine configuration: one plain, validated dataclass per concern."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import numpy as np

from .devices.profile import PRECISIONS

ENGINE_TYPES = ("normal", "prompt", "completion")
PREEMPT_ORDERS = ("longest_output", "shortest_output")
DP_ASSIGNS = ("round_robin", "least_loaded")
DEVICES = ("auto", "cpu", "cuda", "npu")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class SchedulerConfig:
    """What the scheduler needs; the C++ core and the reference read the same names."""

    max_num_batched_tokens: int = 8192  # token budget of one prompt round (padded lengths)
    max_num_seqs: int = 256  # running + newly admitted sequences per DP rank
    num_kv_blocks: int = 4096  # KV blocks in each DP rank's pool
    block_size: int = 16  # tokens per KV block
    cp_size: int = 1  # context-parallel size; chunks align to 2 * cp_size
    dp_size: int = 1  # data-parallel ranks, each with its own block pool
    num_mtp: int = 0  # MTP draft tokens per decode step (q = 1 + num_mtp)
    overlap: bool = False  # one forward in flight while the next step is scheduled
    engine_type: str = "normal"  # normal | prompt | completion
    preempt_order: str = "longest_output"  # longest_output | shortest_output
    dp_assign: str = "round_robin"  # round_robin | least_loaded
    lookahead_slots: Optional[int] = None  # None: (1 + num_mtp) * (1 + overlap); 0 for prompt
    max_prefill_chunk: Optional[int] = None  # None: unlimited

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "overlap":
                if not isinstance(value, bool):
                    raise ValueError(f"overlap must be a bool, got {value!r}")
            elif f.name in ("engine_type", "preempt_order", "dp_assign"):
                allowed = {"engine_type": ENGINE_TYPES, "preempt_order": PREEMPT_ORDERS,
                           "dp_assign": DP_ASSIGNS}[f.name]
                if value not in allowed:
                    raise ValueError(f"{f.name} must be one of {', '.join(allowed)}; got {value!r}")
            elif value is not None or f.name not in ("lookahead_slots", "max_prefill_chunk"):
                check_int(f.name, value, 0 if f.name in ("num_mtp", "lookahead_slots") else 1)
        if self.max_num_batched_tokens < 2 * self.cp_size:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below "
                f"2 * cp_size = {2 * self.cp_size}: no aligned chunk could ever be scheduled")
        if self.max_prefill_chunk is not None and self.max_prefill_chunk < 2 * self.cp_size:
            raise ValueError(
                f"max_prefill_chunk={self.max_prefill_chunk} is below 2 * cp_size = "
                f"{2 * self.cp_size}: no aligned non-final chunk could ever be scheduled")

    @property
    def lookahead(self) -> int:
        """KV slots reserved beyond a finished prefill for the first decode steps."""
        if self.lookahead_slots is not None:
            return self.lookahead_slots
        if self.engine_type == "prompt":
            return 0
        return (1 + self.num_mtp) * (1 + int(self.overlap))


def check_int(name: str, value: object, minimum: int) -> None:
    """Raise ValueError naming `name` unless value is an integer >= minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class EngineConfig:
    """The engine around the scheduler: model, device, executor, sampling."""

    scheduler: SchedulerConfig = SchedulerConfig()
    model: str = "tiny"  # a bundled model name (engine/models/) or a YAML path
    device: str = "auto"  # auto | cpu | cuda | npu
    executor: str = "torch"  # torch (a real forward) | modeled:<device profile> | null
    dtype: str = "float32"  # weights and KV cache of the torch forward
    precision: str = "bf16"  # peak used for MFU and the modeled executor: bf16 | fp8 | fp4
    seed: int = 0  # weights, synthetic prompts and the MTP acceptance model
    mtp_acceptance: Optional[float] = 0.8  # per-draft acceptance; None: verify with the model
    release_gil: bool = True  # schedule() with the GIL released (False: held)

    def __post_init__(self) -> None:
        if not isinstance(self.scheduler, SchedulerConfig):
            raise ValueError(f"scheduler must be a SchedulerConfig, got {self.scheduler!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {self.device!r}")
        if self.executor not in ("torch", "null") and not self.executor.startswith("modeled:"):
            raise ValueError(f"executor must be torch, modeled:<profile> or null; "
                             f"got {self.executor!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {self.dtype!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")
        check_int("seed", self.seed, 0)
        if self.mtp_acceptance is not None and not 0.0 <= self.mtp_acceptance <= 1.0:
            raise ValueError(f"mtp_acceptance must be within 0..1 (or None), got {self.mtp_acceptance}")
