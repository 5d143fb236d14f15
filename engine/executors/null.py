"""The null executor: every step finishes at once and computes nothing. An engine around
it costs only what the scheduler, the engine loop and whoever records it cost: the
harness's own overhead (MLPerf LoadGen's null SUT)."""

from __future__ import annotations

from typing import Final

from .. import _core
from ..config import EngineConfig
from ..devices import detect_device
from ..flops import FlopsEstimator
from ..plan import PlanContract
from .base import ExecutorOutput
from .spec import Built


def build(config: EngineConfig, spec, model_config) -> Built:
    return Built(NullExecutor(config), FlopsEstimator(model_config), detect_device("cpu"))


class NullExecutor:
    holds_requests: Final = False  # no tokens, no KV: the engine adds and drops nothing here

    def __init__(self, config: EngineConfig) -> None:
        self._flops = [_core.StepCost(0.0, 0.0, 0.0)] * config.scheduler.dp_size

    def execute(self, plan: PlanContract) -> ExecutorOutput:
        return ExecutorOutput(accepted=None, forward_ns=0, sample_ns=0, modeled=True,
                              flops=self._flops)
