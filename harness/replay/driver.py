"""The replay driver: requests enter an engine at their (scaled) arrival times, and it
steps until every one is done. `steptrace run`, the null-engine calibration and
`steptrace replay-scheduler` (a bare scheduler stepped as an engine) all replay through it.

- real: the wall clock. Requests are added when their time has come; with nothing to do the
  engine sleeps until the next arrival. Intended vs actual enqueue times are recorded.
  With a frontend (harness/replay/frontend.py) its thread enqueues them at their times instead, and
  the engine's loop drains its queue before every step, never waiting on it while it has
  work, and publishes each step's committed tokens to it; a session trace's turns it
  enqueues as they come due.
- virtual: discrete events. The clock advances by each step's duration (the modeled one on
  a modeled device, else the measured one), so a trace replays as fast as the engine steps,
  and a modeled run's tables are identical for a seed.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from ..traces.sessions import is_sessions
from .sessions import SessionTree, Turns, replay_sessions

PROGRESS_EVERY = 64  # steps between progress callbacks
IDLE_POLL_S = 0.1  # an idle engine's longest wait for the frontend, between stop checks


def engine_step_seconds(record) -> float:
    """A step's length on the virtual clock: the modeled one on a modeled device, else the
    measured one."""
    return (record.forward_ns if record.modeled else record.step_ns) / 1e9


class Requests(NamedTuple):
    """A replay's requests, sorted by arrival, ids 0..n-1: arrival times (s, on the replay's
    clock), prompt and output lengths, and optionally each one's hash ids (one list per
    request) with the tokens each id names. With `concurrency` the arrivals are not the
    trace's: a closed loop keeps that many requests in flight, releasing the next (in trace
    order) when one leaves, and a request arrives when it is released. With `sessions` the
    requests are a session trace's turns (harness/replay/sessions.py), replayed as such."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    max_new_tokens: np.ndarray
    hash_ids: Optional[Sequence] = None
    hash_block_size: Optional[int] = None
    concurrency: Optional[int] = None
    sessions: Optional[SessionTree] = None

    @classmethod
    def of(cls, df, hash_block_size: Optional[int] = None,
           concurrency: Optional[int] = None, live_sessions: Optional[int] = None) \
            -> "Requests":
        """A trace frame's requests (its hash_ids where it has them; its sessions where it
        is a session trace, `live_sessions` of them at a time where given)."""
        return cls(df["arrival_s"].to_numpy(np.float64), df["prompt_len"].to_numpy(),
                   df["max_new_tokens"].to_numpy(),
                   df["hash_ids"].to_numpy(object) if "hash_ids" in df else None,
                   hash_block_size, concurrency,
                   SessionTree.of(df, live_sessions) if is_sessions(df) else None)


def replay(engine, requests: Requests, clock: str, recorder,
           on_step: Optional[Callable[[int, int], None]] = None,
           start: Optional[float] = None, stop: Optional[threading.Event] = None,
           step_seconds: Callable[[Any], float] = engine_step_seconds,
           frontend=None) -> bool:
    """Replay the requests to completion, or until `stop` is set (checked between steps: a
    step and its record always go together). `start` is the perf_counter() value of the
    real clock's zero (default: now). True if completed.

    `engine` is an LLMEngine or anything with its add_request / has_unfinished / step;
    `recorder` a Recorder or anything with its enqueue / step (/ num_done, for on_step and
    a closed loop; / arrived, told a closed loop's arrival times).
    `frontend`, a harness.replay.frontend.Frontend on the real clock, is started here; its
    owner closes it."""
    if frontend is not None and clock == "virtual":
        raise ValueError("a frontend thread needs the real clock")
    if frontend is not None and requests.concurrency:
        raise ValueError("a frontend thread enqueues at the trace's times, not in a closed loop")
    if requests.sessions is not None and requests.concurrency:
        raise ValueError("sessions are their own closed loop (load.mode: sessions)")
    if requests.sessions is not None and frontend is None:
        return replay_sessions(engine, requests, clock, recorder, on_step,
                               time.perf_counter() if start is None else start,
                               threading.Event() if stop is None else stop, step_seconds,
                               PROGRESS_EVERY)
    args = (engine, requests, clock == "virtual", recorder, step_seconds, frontend,
            time.perf_counter() if start is None else start)
    turns: Optional[Turns] = None
    if requests.sessions is None:
        run = _Replay(*args)
    else:
        run = sessions_run = _FrontendTurns(*args)
        turns = Turns(requests.sessions, requests.arrival_s, sessions_run.sessions_ended.put)
    stop = threading.Event() if stop is None else stop
    if frontend is not None:
        frontend.start(run.start, turns)
    n = len(run.arrivals)
    while (run.next < n or engine.has_unfinished()) and not stop.is_set():
        if run.step(stop) and on_step is not None and run.steps % PROGRESS_EVERY == 0:
            on_step(recorder.num_done, n)
    if on_step is not None:
        on_step(recorder.num_done, n)
    return not stop.is_set()


class _Replay:
    """The loop's state: the next request to add, the clock, the steps taken."""

    def __init__(self, engine, requests: Requests, virtual: bool, recorder, step_seconds,
                 frontend, start: float) -> None:
        self.engine, self.recorder, self.frontend = engine, recorder, frontend
        self.virtual, self.step_seconds, self.start = virtual, step_seconds, start
        # Read through memoryviews: Python numbers made as needed (lists of a
        # million-request trace would hold tens of MB), and no numpy scalar in the per-step
        # comparison.
        self.arrivals = np.ascontiguousarray(requests.arrival_s, np.float64).data
        self.prompt_len = np.ascontiguousarray(requests.prompt_len, np.int64).data
        self.max_new_tokens = np.ascontiguousarray(requests.max_new_tokens, np.int64).data
        self.hash_ids, self.hash_block_size = requests.hash_ids, requests.hash_block_size
        self.window = requests.concurrency  # None: open loop, the trace's arrivals
        self.now = 0.0  # seconds since the replay began, on the chosen clock
        self.next = self.steps = 0

    def add(self, i: int, t: float) -> None:
        if self.window:  # a closed loop's request arrives when it is released
            self.recorder.arrived(i, t)
        self.enqueue(i, t if self.window else self.arrivals[i], t)

    def enqueue(self, i: int, arrival: float, t: float):
        """Request i, arrived at `arrival`, added to the engine at t: its record as added."""
        added = self.engine.add_request(
            i, prompt_len=self.prompt_len[i], max_new_tokens=self.max_new_tokens[i],
            arrival_time=arrival, hash_ids=None if self.hash_ids is None else self.hash_ids[i],
            hash_block_size=self.hash_block_size)
        self.recorder.enqueue(added, t)
        return added

    def due(self) -> bool:
        """The next request may enter: its arrival has come, or (a closed loop) fewer than
        the window are in flight."""
        if self.window:
            return self.next < self.recorder.num_done + self.window
        return self.arrivals[self.next] <= self.now

    def step(self, stop: threading.Event) -> bool:
        """The requests due added, then one engine step recorded (True), or the wait for
        the next arrival of an idle engine (False)."""
        engine, n = self.engine, len(self.arrivals)
        if not self.virtual:
            self.now = time.perf_counter() - self.start
        if self.frontend is not None:
            self.next += _drain(self.frontend.requests, self.add, self.start,
                                engine.has_unfinished())
        while self.frontend is None and self.next < n and self.due():
            self.add(self.next, self.now)
            self.next += 1
        if not engine.has_unfinished():  # idle until the next arrival, if any
            if self.next < n and self.virtual:
                self.now = self.arrivals[self.next]
            elif self.next < n and self.frontend is None:
                stop.wait(max(0.0, self.arrivals[self.next] - self.now))
            return False
        step_start = self.now
        record = engine.step()
        if record is None:  # overlap: the first step is still in flight
            return False
        self.now = self.now + self.step_seconds(record) if self.virtual \
            else time.perf_counter() - self.start
        if self.frontend is not None:
            self.frontend.publish(record, self.now)
        self.recorder.step(record, step_start, self.now)
        self.steps += 1
        return True


class _FrontendTurns(_Replay):
    """A session trace's turns, enqueued by the frontend's thread as they come due (it
    learns of their ends from the steps published to it, and from here of a turn rejected
    as it came). The engine is told a session's end before the step after the frontend
    learnt it."""

    def __init__(self, engine, requests: Requests, *args) -> None:
        super().__init__(engine, requests, *args)
        assert requests.sessions is not None, "a session trace's"
        engine.sessions = requests.sessions.session_id  # each turn's, for the scheduler
        self.sessions_ended: queue.SimpleQueue = queue.SimpleQueue()  # the frontend's word

    def step(self, stop: threading.Event) -> bool:
        while not self.sessions_ended.empty():
            self.engine.end_session(self.sessions_ended.get())
        return super().step(stop)

    def add(self, i: int, t: float) -> None:
        due = self.frontend.arrival(i)
        self.recorder.arrived(i, due)
        if self.enqueue(i, due, t).status != "waiting":  # rejected (or done) as it came
            self.frontend.ended(i, t)


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
