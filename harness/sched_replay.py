"""Scheduler-only replay: a trace's arrivals through the C++ scheduler and the pure-Python
reference side by side, on a virtual step clock, checking that both plan identically."""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

import numpy as np

from engine import ReferenceScheduler, Scheduler, SchedulerConfig

COLUMNS = ("arrival_s", "prompt_len", "output_len")


@dataclass
class Trace:
    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)


def read_tidy_csv(path: Path) -> Trace:
    """Read arrival_s,prompt_len,output_len rows; errors name the file, line and value."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != COLUMNS:
            raise ValueError(f"{path}:1: expected the header {','.join(COLUMNS)}, got {header}")
        rows = []
        for line, row in enumerate(reader, start=2):
            if len(row) != 3:
                raise ValueError(f"{path}:{line}: expected 3 values, got {len(row)}")
            try:
                arrival, prompt, output = float(row[0]), int(row[1]), int(row[2])
            except ValueError:
                raise ValueError(f"{path}:{line}: expected a number and two integers, got {row}")
            if arrival < 0 or prompt < 1 or output < 1:
                raise ValueError(f"{path}:{line}: arrival_s must be >= 0 and lengths >= 1, got {row}")
            if rows and arrival < rows[-1][0]:
                raise ValueError(f"{path}:{line}: arrival_s {arrival} is before the previous row's")
            rows.append((arrival, prompt, output))
    if not rows:
        raise ValueError(f"{path}: no requests")
    cols = list(zip(*rows))
    return Trace(np.array(cols[0]), np.array(cols[1], dtype=np.int64),
                 np.array(cols[2], dtype=np.int64))


@dataclass
class ReplayResult:
    steps: int = 0
    prompt_rounds: int = 0
    preemptions: int = 0
    finished: int = 0
    rejected: int = 0
    call_ns: List[int] = field(default_factory=list)  # schedule() as Python sees it
    plans: List[tuple] = field(default_factory=list)  # (phase, seq_ids, seqlen_q, seqlen_k)


def replay(trace: Trace, config: SchedulerConfig, step_s: float, impl: str) -> ReplayResult:
    """Step the scheduler with a fixed virtual step time; requests join at their arrival."""
    sched = Scheduler(config) if impl == "cpp" else ReferenceScheduler(config)
    out = ReplayResult()
    clock, nxt, n = 0.0, 0, len(trace)
    outstanding = []
    while nxt < n or not sched.is_finished() or outstanding:
        if sched.is_finished() and not outstanding and nxt < n:
            clock = max(clock, float(trace.arrival_s[nxt]))  # idle until the next arrival
        while nxt < n and trace.arrival_s[nxt] <= clock:
            sched.add_sequence(seq_id=nxt, prompt_len=int(trace.prompt_len[nxt]),
                               max_new_tokens=int(trace.output_len[nxt]),
                               arrival_time=float(trace.arrival_s[nxt]))
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
