"""Scheduler-only replay: a trace's arrivals through the C++ scheduler and the pure-Python
reference side by side, on a virtual step clock, checking that both plan identically."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List

import numpy as np
import pandas as pd

from engine import ReferenceScheduler, Scheduler, SchedulerConfig

@dataclass
class ReplayResult:
    steps: int = 0
    prompt_rounds: int = 0
    preemptions: int = 0
    finished: int = 0
    rejected: int = 0
    call_ns: List[int] = field(default_factory=list)  # schedule() as Python sees it
    plans: List[tuple] = field(default_factory=list)  # (phase, seq_ids, seqlen_q, seqlen_k)


def replay(trace: pd.DataFrame, config: SchedulerConfig, step_s: float, impl: str) -> ReplayResult:
    """Step the scheduler with a fixed virtual step time; requests join at their arrival."""
    sched = Scheduler(config) if impl == "cpp" else ReferenceScheduler(config)
    arrival_s, prompt_len, output_len = (trace[c].to_numpy() for c in
                                         ("arrival_s", "prompt_len", "max_new_tokens"))
    out = ReplayResult()
    clock, nxt, n = 0.0, 0, len(trace)
    outstanding = []
    while nxt < n or not sched.is_finished() or outstanding:
        if sched.is_finished() and not outstanding and nxt < n:
            clock = max(clock, float(arrival_s[nxt]))  # idle until the next arrival
        while nxt < n and arrival_s[nxt] <= clock:
            sched.add_sequence(seq_id=nxt, prompt_len=int(prompt_len[nxt]),
                               max_new_tokens=int(output_len[nxt]),
                               arrival_time=float(arrival_s[nxt]))
            nxt += 1
        start = time.perf_counter_ns()
        plan = sched.schedule()
        out.call_ns.append(time.perf_counter_ns() - start)
        out.steps += 1
        out.prompt_rounds += plan.phase == "prompt"
        out.preemptions += len(plan.preempted)
        out.rejected += len(plan.rejected)
        out.plans.append((plan.phase,) + tuple(
            np.concatenate([getattr(b, k) for b in plan.batches]).tobytes()
            for k in ("seq_ids", "seqlen_q", "seqlen_k")))
        outstanding.append(plan)
        if len(outstanding) > int(config.overlap):  # overlap: post-process the previous plan
            out.finished += len(sched.postprocess(outstanding.pop(0)).finished)
        if sched.is_finished() and nxt >= n:
            for p in outstanding:
                out.finished += len(sched.postprocess(p).finished)
            outstanding = []
        clock += step_s
    return out
