"""build_loop: the loop a workload's run is replayed by (harness/replay/loop.py's Loop),
its engines made."""

from __future__ import annotations

import threading

import numpy as np

from engine import LLMEngine

from ..ranks.loop import RanksLoop
from ..replay.frontend import Frontend
from ..replay.loop import Loop, NativeLoop, NativePDLoop, PythonLoop, PythonPDLoop
from ..workload import Workload


def build_loop(workload: Workload, arm: str, trace, stop: threading.Event) -> Loop:
    """Engine processes on a torch device of more than one rank; a P/D deployment's engines
    in this process on modeled devices; else one engine. The C++ loops where the workload
    asks for them (`replay_loop: cpp`, on the virtual clock); the frontend's thread with the
    Python loop where it asks for that (`frontend.mode: thread`, `stop` ends it)."""
    if workload.ranks > 1:
        return RanksLoop(workload, arm)
    native = workload.replay_loop == "cpp"
    service = workload.disaggregation
    if service is not None:
        pd = NativePDLoop if native else PythonPDLoop
        return pd(service, [(pool.role, k, LLMEngine(workload.engine_config(arm, pool)))
                            for pool in service.pools for k in range(pool.instances)])
    engine = LLMEngine(workload.engine_config(arm))
    if native:
        return NativeLoop(engine)
    frontend = Frontend(trace.df["arrival_s"].to_numpy(np.float64),
                        workload.frontend.per_token_us, workload.warmup_steps, stop) \
        if workload.frontend.mode == "thread" else None
    return PythonLoop(engine, workload.clock, frontend)
