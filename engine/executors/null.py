"""The null executor: every step finishes at once and computes nothing. An engine around
it costs only what the scheduler, the engine loop and whoever records it cost: the
harness's own overhead (MLPerf LoadGen's null SUT)."""

from __future__ import annotations

from ..config import EngineConfig
from .base import ExecutorOutput


class NullExecutor:
    holds_requests = False

    def __init__(self, config: EngineConfig) -> None:
        self._flops = ((0.0, 0.0, 0.0),) * config.scheduler.dp_size

    def add(self, rank: int, seq_id: int, prompt_token_ids) -> None:
        pass

    def drop(self, rank: int, seq_id: int) -> None:
        pass

    def tokens(self, rank: int, seq_id: int):
        raise ValueError("the null executor generates no tokens")

    def execute(self, plan) -> ExecutorOutput:
        return ExecutorOutput(accepted=None, forward_ns=0, sample_ns=0, modeled=True,
                              flops=self._flops)
