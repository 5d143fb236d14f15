"""What every executor returns for one plan."""

from dataclasses import dataclass
from typing import Optional


@dataclass(slots=True)
class ExecutorOutput:
    accepted: Optional[list]  # MTP drafts accepted per row, an array per DP rank; None: none
    forward_ns: int  # the forward of every rank (measured, or modeled)
    sample_ns: int  # sampling and draft bookkeeping
    modeled: bool  # True when the durations come from a device model, not a clock
    flops: Optional[list] = None  # a _core.StepCost per rank, if computed
