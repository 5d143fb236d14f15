"""Engine configuration: one plain, validated dataclass per concern (SchedulerConfig's
fields are declared in the C++ core: engine/scheduler_config.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .deployment import Deployment
from .devices.profile import PRECISIONS
from .executors.spec import ExecutorSpec
from .scheduler_config import SchedulerConfig, choices

ENGINE_TYPES = choices("engine_type")
PREEMPT_ORDERS = choices("preempt_order")
DP_ASSIGNS = choices("dp_assign")
DEVICES = ("auto", "cpu", "cuda", "npu")
DTYPES = ("float32", "bfloat16", "float16")
# engine: argmax over the forward at `dtype`, MTP drafts accepted by the seeded model;
# greedy: argmax over a float64 forward, drafts verified, prompts seeded per request, so a
# request's tokens do not depend on how requests are batched (docs/workloads.md, sampling)
SAMPLINGS = ("engine", "greedy")
# The emulated executor's host cost of launching one decoder layer in eager mode, in us:
# 148 torch ops x 6.8 us a small op's dispatch on the 2-core development host
# (python -m tests.bench.launch_cost, 2026-12-01; docs/workloads.md).
LAUNCH_US = 1000.0


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
    executor: str = "torch"  # an ExecutorSpec: torch | modeled:<device profile> | null
    dtype: str = "float32"  # weights and KV cache of the torch forward
    precision: str = "bf16"  # peak used for MFU and the modeled executor: bf16 | fp8 | fp4 | int8
    seed: int = 0  # weights, synthetic prompts and the MTP acceptance model
    mtp_acceptance: Optional[float] = 0.8  # per-draft acceptance; None: verify with the model
    release_gil: bool = True  # schedule() with the GIL released (False: held)
    # modeled executors: how the model spreads over devices; None: one device, whole-batch
    # roofline
    deployment: Optional[Deployment] = None
    release_gil_postprocess: bool = False  # postprocess()'s C++ part with the GIL released
    launch_us: float = LAUNCH_US  # emulated executor: host launch cost per decoder layer
    # torch executor on CUDA or an NPU: num_kv_blocks derived from device memory at this
    # share of it (engine/kv_pool.py), or (size_kv_blocks False) the configured one checked
    # against it; None: scheduler.num_kv_blocks as given, unchecked
    memory_utilization: Optional[float] = None
    size_kv_blocks: bool = True
    sampling: str = "engine"  # one of SAMPLINGS
    keep_tokens: bool = False  # the torch executor keeps finished requests' output tokens

    def __post_init__(self) -> None:
        if not isinstance(self.scheduler, SchedulerConfig):
            raise ValueError(f"scheduler must be a SchedulerConfig, got {self.scheduler!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {self.device!r}")
        ExecutorSpec.parse(self.executor, "executor")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {self.dtype!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")
        check_int("seed", self.seed, 0)
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}; got "
                             f"{self.sampling!r}")
        if isinstance(self.launch_us, bool) or not isinstance(self.launch_us, (int, float)) \
                or not 0.0 <= self.launch_us < float("inf"):
            raise ValueError(f"launch_us must be a finite number >= 0, got {self.launch_us!r}")
        if self.mtp_acceptance is not None and not 0.0 <= self.mtp_acceptance <= 1.0:
            raise ValueError(f"mtp_acceptance must be within 0..1 (or None), got {self.mtp_acceptance}")
        u = self.memory_utilization
        if u is not None and (isinstance(u, bool) or not isinstance(u, (int, float))
                              or not 0.0 < u <= 1.0):
            raise ValueError(f"memory_utilization must be within (0, 1] (or None), got {u!r}")
        if self.deployment is not None and not isinstance(self.deployment, Deployment):
            raise ValueError(f"deployment must be a Deployment or None, got {self.deployment!r}")
