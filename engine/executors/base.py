"""What every executor returns for one plan."""

from dataclasses import dataclass
from typing import List, Optional

import numpy as np


@dataclass
class ExecutorOutput:
    accepted: List[np.ndarray]  # MTP drafts accepted per row, one array per DP rank
    forward_ns: int  # the forward of every rank (measured, or modeled)
    sample_ns: int  # sampling and draft bookkeeping
    modeled: bool  # True when the durations come from a device model, not a clock
    flops: Optional[list] = None  # StepFlops per rank (None: empty) when already computed
