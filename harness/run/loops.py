"""build_loop: the loop a workload's run is replayed by (harness/replay/loop.py's Loop),
its engines made."""

from __future__ import annotations

import threading

import numpy as np

from engine import LLMEngine

from ..errors import BadInput
from ..ranks.loop import RanksLoop
from ..replay.frontend import Frontend
from ..replay.loop import Loop, NativeLoop, NativePDLoop, PythonLoop, PythonPDLoop
from ..workload import Workload
from ..workload.session_checks import replays_sessions


def build_loop(workload: Workload, arm: str, trace, stop: threading.Event) -> Loop:
    """The client of the workload's `target` endpoint where it names one (no engine here);
    engine processes on a torch device of more than one rank; a P/D deployment's engines
    in this process on modeled devices; else one engine. The C++ loops where the workload
    asks for them (`replay_loop: cpp`, on the virtual clock); the frontend's thread with the
    Python loop where it asks for that (`frontend.mode: thread`, `stop` ends it)."""
    if workload.target is not None:
        try:  # the serve extra's: a run without a target never imports it
            from ..replay.client import ClientLoop
        except ImportError as e:
            raise BadInput(f"{workload.path}: a run against an endpoint needs aiohttp "
                           f"(pip install 'steptrace[serve]'): {e}") from None
        return ClientLoop(workload.target, workload.seeds.engine)
    if workload.ranks > 1:
        if replays_sessions(workload.values):
            raise BadInput(f"{workload.path}: sessions are replayed into one engine in this "
                           f"process, not {workload.ranks} engine processes")
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
