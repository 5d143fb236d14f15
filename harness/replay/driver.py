"""The replay driver: requests enter an engine at their (scaled) arrival times, and it
steps until every one is done. `steptrace run`, the null-engine calibration and
`steptrace replay-scheduler` (a bare scheduler stepped as an engine) all replay through it.

- real: the wall clock. Requests are added when their time has come; with nothing to do the
  engine sleeps until the next arrival. Intended vs actual enqueue times are recorded.
  With a frontend (harness/replay/frontend.py) its thread enqueues them at their times instead, and
  the engine's loop drains its queue before every step, never waiting on it while it has
  work, and publishes each step's committed tokens to it.
- virtual: discrete events. The clock advances by each step's duration (the modeled one on
  a modeled device, else the measured one), so a trace replays as fast as the engine steps,
  and a modeled run's tables are identical for a seed.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Optional, Sequence

import numpy as np

PROGRESS_EVERY = 64  # steps between progress callbacks
IDLE_POLL_S = 0.1  # an idle engine's longest wait for the frontend, between stop checks


def engine_step_seconds(record) -> float:
    """A step's length on the virtual clock: the modeled one on a modeled device, else the
    measured one."""
    return (record.forward_ns if record.modeled else record.step_ns) / 1e9


def replay(engine, arrivals: np.ndarray, prompt_len: np.ndarray,
           max_new_tokens: np.ndarray, clock: str, recorder,
           on_step: Optional[Callable[[int, int], None]] = None,
           start: Optional[float] = None, stop: Optional[threading.Event] = None,
           step_seconds: Callable[[object], float] = engine_step_seconds,
           hash_ids: Optional[Sequence] = None, hash_block_size: Optional[int] = None,
           frontend=None) -> bool:
    """Replay the requests (sorted by arrival, ids 0..n-1) to completion, or until `stop`
    is set (checked between steps: a step and its record always go together). `start` is
    the perf_counter() value of the real clock's zero (default: now). True if completed.
    `hash_ids` (one list per request, or None) go to add_request with `hash_block_size`.

    `engine` is an LLMEngine or anything with its add_request / has_unfinished / step;
    `recorder` a Recorder or anything with its enqueue / step (/ num_done, for on_step).
    `frontend`, a harness.replay.frontend.Frontend on the real clock, is started here; its owner
    closes it."""
    virtual = clock == "virtual"
    stop = threading.Event() if stop is None else stop
    # Read through memoryviews: Python numbers made as needed (lists of a million-request
    # trace would hold tens of MB), and no numpy scalar in the per-step comparison.
    arrivals = memoryview(np.ascontiguousarray(arrivals, np.float64))
    prompt_len = memoryview(np.ascontiguousarray(prompt_len, np.int64))
    max_new_tokens = memoryview(np.ascontiguousarray(max_new_tokens, np.int64))
    start = time.perf_counter() if start is None else start
    now = 0.0  # seconds since the replay began, on the chosen clock
    n, nxt, steps = len(arrivals), 0, 0

    def add(i: int, t: float) -> None:
        recorder.enqueue(engine.add_request(
            i, prompt_len=prompt_len[i], max_new_tokens=max_new_tokens[i],
            arrival_time=arrivals[i], hash_ids=None if hash_ids is None else hash_ids[i],
            hash_block_size=hash_block_size), t)

    if frontend is not None:
        if virtual:
            raise ValueError("a frontend thread needs the real clock")
        frontend.start(start)
    while (nxt < n or engine.has_unfinished()) and not stop.is_set():
        if not virtual:
            now = time.perf_counter() - start
        if frontend is not None:
            nxt += _drain(frontend.requests, add, start, engine.has_unfinished())
        while frontend is None and nxt < n and arrivals[nxt] <= now:
            add(nxt, now)
            nxt += 1
        if not engine.has_unfinished():  # idle until the next arrival, if any
            if nxt < n and virtual:
                now = arrivals[nxt]
            elif nxt < n and frontend is None:
                stop.wait(max(0.0, arrivals[nxt] - now))
            continue
        step_start = now
        record = engine.step()
        if record is None:  # overlap: the first step is still in flight
            continue
        if virtual:
            now += step_seconds(record)
        else:
            now = time.perf_counter() - start
        if frontend is not None:
            frontend.publish(record, now)
        recorder.step(record, step_start, now)
        steps += 1
        if on_step is not None and steps % PROGRESS_EVERY == 0:
            on_step(recorder.num_done, n)
    if on_step is not None:
        on_step(recorder.num_done, n)
    return not stop.is_set()


def _drain(requests: queue.SimpleQueue, add: Callable[[int, float], None], start: float,
           busy: bool) -> int:
    """Add what the frontend enqueued; an idle engine waits (IDLE_POLL_S at most) for one."""
    added = 0
    while True:
        try:
            i = requests.get_nowait() if busy or added else requests.get(timeout=IDLE_POLL_S)
        except queue.Empty:
            return added
        add(i, time.perf_counter() - start)
        added += 1
