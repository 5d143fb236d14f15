"""Replay clocks: requests enter the engine at their (scaled) arrival times.

- real: the wall clock. Requests are added when their time has come; with nothing to do the
  engine sleeps until the next arrival. Intended vs actual enqueue times are recorded.
- virtual: discrete events. The clock advances by each step's duration (the modeled one on
  a modeled device, else the measured one), so a trace replays as fast as the engine steps,
  and a modeled run's tables are identical for a seed.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np

from engine import LLMEngine

from .recorder import Recorder

PROGRESS_EVERY = 64  # steps between progress callbacks


def replay(engine: LLMEngine, arrivals: np.ndarray, prompt_len: np.ndarray,
           output_len: np.ndarray, clock: str, recorder: Recorder,
           on_step: Optional[Callable[[int, int], None]] = None,
           start: Optional[float] = None, stop: Optional[threading.Event] = None) -> bool:
    """Replay the requests (sorted by arrival, ids 0..n-1) to completion, or until `stop`
    is set (checked between steps: a step and its record always go together). `start` is
    the perf_counter() value of the real clock's zero (default: now). True if completed."""
    virtual = clock == "virtual"
    stop = threading.Event() if stop is None else stop
    arrivals = arrivals.tolist()  # Python floats: compared once per step
    prompt_len, output_len = prompt_len.tolist(), output_len.tolist()
    start = time.perf_counter() if start is None else start
    now = 0.0  # seconds since the replay began, on the chosen clock
    n, nxt, steps = len(arrivals), 0, 0
    while (nxt < n or engine.has_unfinished()) and not stop.is_set():
        if not virtual:
            now = time.perf_counter() - start
        while nxt < n and arrivals[nxt] <= now:
            recorder.enqueue(engine.add_request(nxt, prompt_len=prompt_len[nxt],
                                                max_new_tokens=output_len[nxt],
                                                arrival_time=arrivals[nxt]), now)
            nxt += 1
        if not engine.has_unfinished():  # idle until the next arrival, if any
            if nxt < n and virtual:
                now = arrivals[nxt]
            elif nxt < n:
                stop.wait(max(0.0, arrivals[nxt] - now))
            continue
        step_start = now
        record = engine.step()
        if record is None:  # overlap: the first step is still in flight
            continue
        if virtual:
            now += (record.forward_ns if record.modeled else record.step_ns) / 1e9
        else:
            now = time.perf_counter() - start
        recorder.step(record, step_start, now)
        steps += 1
        if on_step is not None and steps % PROGRESS_EVERY == 0:
            on_step(recorder.num_done, n)
    if on_step is not None:
        on_step(recorder.num_done, n)
    return not stop.is_set()
