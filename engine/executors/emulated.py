"""The emulated executor: the host side of a step runs for real, the device is modeled.

Per DP rank with rows, the Worker's input packing (the packed layout, made tensors) and a
Python-side launch cost per decoder layer, paid with the GIL held as an eager-mode engine's
dispatch pays it (`launch_us`, a spin). Then the device time, the modeled executor's
roofline of the plan, waited for with the GIL released, as a CUDA stream synchronisation
waits. A step's forward is therefore the host's real time plus the roofline; with
`overlap: true` it runs on the forward thread, as next to a real device:

    forward_ns = measured (packing + layers * launch_us + sleep(roofline))

Durations are measured on the wall clock, so a run replays on the real clock.
"""

from __future__ import annotations

import time
from typing import Final

import numpy as np
import torch

from ..config import EngineConfig
from ..packing import packed_layout
from ..plan import BatchContract, PlanContract
from .base import ExecutorOutput
from .modeled import build as build_modeled
from .spec import Built


def build(config: EngineConfig, spec, model_config) -> Built:
    modeled = build_modeled(config, spec, model_config)
    layers = model_config.num_hidden_layers + config.scheduler.num_mtp
    return modeled._replace(executor=EmulatedExecutor(config, modeled.executor, layers))


class EmulatedExecutor:
    holds_requests: Final = False  # packing needs lengths and blocks only: no token ids

    def __init__(self, config: EngineConfig, roofline, layers: int) -> None:
        self.roofline = roofline  # a ModeledExecutor: the device time and the FLOPs
        self.block_size = config.scheduler.block_size
        self.launch_ns = int(round(config.launch_us * 1e3)) * layers

    def execute(self, plan: PlanContract) -> ExecutorOutput:
        start = time.perf_counter_ns()
        modeled = self.roofline.execute(plan)
        for batch in plan.batches:
            if len(batch.seq_ids):
                self._launch(batch)
        time.sleep(modeled.forward_ns / 1e9)  # releases the GIL, as a stream sync does
        return ExecutorOutput(accepted=modeled.accepted,
                              forward_ns=time.perf_counter_ns() - start, sample_ns=0,
                              modeled=False, flops=modeled.flops)

    def _launch(self, batch: BatchContract) -> None:
        layout = packed_layout(batch, self.block_size)
        for array in (layout.positions, layout.slots, layout.tables,
                      np.zeros(len(layout.positions), np.int64)):  # the ids' tensor
            torch.as_tensor(array)
        deadline = time.perf_counter_ns() + self.launch_ns
        while time.perf_counter_ns() < deadline:  # dispatch: Python holding the GIL
            pass
