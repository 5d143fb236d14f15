"""Scheduler-only replay: a trace's arrivals through the C++ scheduler and the pure-Python
reference side by side, on a virtual step clock, checking that both plan identically. Each
bare scheduler is stepped as an engine by the one replay driver (harness/replay/driver.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List

import numpy as np
import pandas as pd

from engine._core import Scheduler
from engine.config import SchedulerConfig
from engine.plan import PlanContract
from engine.reference_scheduler import ReferenceScheduler

from .driver import Requests, replay as drive


@dataclass
class SchedulerStep:
    plan: PlanContract  # the C++ scheduler's, or the reference's
    call_ns: int  # schedule() as Python sees it
    finished: int  # sequences finished by the plans post-processed in this step
    step_s: float


class SchedulerStepper:
    """A bare scheduler as the driver steps an engine: every step plans, post-processes the
    previous plan with overlap (else this one) and lasts `step_s`; once the last request
    has arrived and none is left, the plans still outstanding are post-processed at once."""

    def __init__(self, sched, overlap: bool, step_s: float, requests: int) -> None:
        self.sched, self.overlap, self.step_s = sched, overlap, step_s
        self.left_to_add = requests
        self.outstanding: list = []

    def add_request(self, seq_id, prompt_len, max_new_tokens, arrival_time, hash_ids=None,
                    hash_block_size=None) -> None:
        self.sched.add_sequence(seq_id=seq_id, prompt_len=prompt_len,
                                max_new_tokens=max_new_tokens, arrival_time=arrival_time,
                                hash_ids=hash_ids, hash_block_size=hash_block_size)
        self.left_to_add -= 1

    def has_unfinished(self) -> bool:
        return not self.sched.is_finished() or bool(self.outstanding)

    def step(self) -> SchedulerStep:
        start = time.perf_counter_ns()
        plan = self.sched.schedule()
        call_ns = time.perf_counter_ns() - start
        self.outstanding.append(plan)
        finished = 0
        if len(self.outstanding) > int(self.overlap):
            finished += len(self.sched.postprocess(self.outstanding.pop(0)).finished)
        if self.sched.is_finished() and not self.left_to_add:
            for p in self.outstanding:
                finished += len(self.sched.postprocess(p).finished)
            self.outstanding = []
        return SchedulerStep(plan, call_ns, finished, self.step_s)


@dataclass
class ReplayResult:
    """The replay's statistics, taken step by step as the driver's recorder."""

    steps: int = 0
    prompt_rounds: int = 0
    preemptions: int = 0
    finished: int = 0
    rejected: int = 0
    call_ns: List[int] = field(default_factory=list)  # schedule() as Python sees it
    plans: List[tuple] = field(default_factory=list)  # (phase, seq_ids, seqlen_q, seqlen_k)

    def enqueue(self, added, t: float) -> None:
        pass

    def step(self, record: SchedulerStep, t_start: float, t_end: float) -> None:
        plan = record.plan
        self.call_ns.append(record.call_ns)
        self.steps += 1
        self.prompt_rounds += plan.phase == "prompt"
        self.preemptions += len(plan.preempted)
        self.rejected += len(plan.rejected)
        self.finished += record.finished
        self.plans.append((plan.phase,) + tuple(
            np.concatenate([getattr(b, k) for b in plan.batches]).tobytes()
            for k in ("seq_ids", "seqlen_q", "seqlen_k")))


def replay(trace: pd.DataFrame, config: SchedulerConfig, step_s: float, impl: str) -> ReplayResult:
    """Step the scheduler with a fixed virtual step time; requests join at their arrival."""
    sched = Scheduler(config) if impl == "cpp" else ReferenceScheduler(config)
    stepper = SchedulerStepper(sched, config.overlap, step_s, len(trace))
    out = ReplayResult()
    drive(stepper, Requests.of(trace, trace.attrs.get("hash_block_size")), "virtual", out,
          step_seconds=lambda record: record.step_s)
    return out
