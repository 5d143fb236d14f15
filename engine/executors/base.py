"""What every executor returns for one plan, and what the engine asks of one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Literal, Optional, Protocol, Union

if TYPE_CHECKING:
    import numpy as np

    from .. import _core

# A StepCost per DP rank: a list, or the deployment model's StepCosts.
RankCosts = Union[List["_core.StepCost"], "_core.StepCosts"]


@dataclass(slots=True)
class ExecutorOutput:
    # MTP drafts accepted per row, an array per DP rank; None: none
    accepted: Optional[List[np.ndarray]]
    forward_ns: int  # the forward of every rank (measured, or modeled)
    sample_ns: int  # sampling and draft bookkeeping
    modeled: bool  # True when the durations come from a device model, not a clock
    flops: Optional[RankCosts] = None  # a _core.StepCost per rank, if computed
    # per DP rank, ns of each measured part of its forward (engine/step_parts.py); None:
    # not measured (a modeled step's parts are its StepCosts')
    parts: Optional[List[Dict[str, int]]] = None


class LengthsExecutor(Protocol):
    """One that needs only the plan's lengths and blocks (modeled, emulated, null)."""

    @property
    def holds_requests(self) -> Literal[False]: ...

    def execute(self, plan: _core.Plan) -> ExecutorOutput: ...


class RequestsExecutor(Protocol):
    """One that holds each request's token ids and KV (torch): the engine adds each request
    to it and drops it once finished or rejected."""

    @property
    def holds_requests(self) -> Literal[True]: ...

    def execute(self, plan: _core.Plan) -> ExecutorOutput: ...

    def add(self, rank: int, seq_id: int, prompt_token_ids: List[int]) -> None: ...

    def drop(self, seq_id: int) -> None: ...

    def tokens(self, rank: int, seq_id: int) -> List[int]: ...

    def output_tokens(self) -> Dict[int, List[int]]: ...


Executor = Union[LengthsExecutor, RequestsExecutor]  # told apart by holds_requests
