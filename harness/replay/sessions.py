"""Sessions replayed (harness/traces/sessions.py): a turn arrives when its parent's last
token is out plus its gap; a turn's sub-agent children arrive together, and its next turn
once it and every sub-agent subtree have ended. Sessions start at the trace's times (open
loop) or, with `live`, as a closed loop of that many sessions, the next (in trace order)
starting when one ends. A turn the engine rejects ends there, as a finished one would. The
engine is told when a session has ended (engine.end_session: session_retention).

On the virtual clock the loop jumps to the next event when the engine is idle; on the real
clock it waits for it. The recorder is told each turn's arrival (Recorder.arrived).
Turns, when each turn is due, is the engine-free part: the endpoint's client
(client_sessions.py) and the frontend's thread (frontend.py) replay sessions with it too.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

import numpy as np


class SessionTree(NamedTuple):
    """A session trace's structure, by request row: the parent's row (-1: a root), the gap
    after it (s), whether the turn is a sub-agent's first, its session; `live`, the closed
    loop's sessions (None: the trace's session starts); and `recorded`, whether each turn's
    prompt is the trace's (prompt_tokens) rather than its parent's context and its input."""

    parent: np.ndarray
    gap_s: np.ndarray
    subagent: np.ndarray
    session_id: np.ndarray
    live: Optional[int] = None
    recorded: bool = False

    @classmethod
    def of(cls, df, live: Optional[int] = None) -> "SessionTree":
        return cls(df["parent_row"].to_numpy(np.int64), df["gap_s"].to_numpy(np.float64),
                   (df["gap_kind"] == "subagent").to_numpy(bool),
                   df["session_id"].to_numpy(np.int64), live,
                   bool(df.attrs.get("recorded_prompts")))


class _Tree:
    """The turns' links, and what each turn waits for."""

    def __init__(self, tree: SessionTree) -> None:
        n = len(tree.parent)
        self.parent = tree.parent.tolist()
        self.gap = tree.gap_s.tolist()
        self.subagent = tree.subagent.tolist()
        self.session_id = tree.session_id.tolist()
        self.next: List[int] = [-1] * n  # the turn's next turn
        self.subagents: List[List[int]] = [[] for _ in range(n)]
        for i, p in enumerate(self.parent):
            if p >= 0:
                (self.subagents[p].append(i) if self.subagent[i] else
                 self.next.__setitem__(p, i))
        # a turn's next turn waits for it and its sub-agents' subtrees
        self.pending = [1 + len(s) for s in self.subagents]
        self.roots = [i for i, p in enumerate(self.parent) if p < 0]


def replay_sessions(engine, requests, clock: str, recorder,
                    on_step: Optional[Callable[[int, int], None]], start: float,
                    stop: threading.Event, step_seconds: Callable[[Any], float],
                    progress_every: int) -> bool:
    """As harness/replay/driver.py's replay, for requests with `sessions`; on_step every
    `progress_every` steps."""
    run = _Sessions(engine, requests, clock == "virtual", recorder, step_seconds, start)
    n = len(run.tree.parent)
    while (run.events or engine.has_unfinished()) and not stop.is_set():
        if run.step(stop) and on_step is not None and run.steps % progress_every == 0:
            on_step(recorder.num_done, n)
    if on_step is not None:
        on_step(recorder.num_done, n)
    return not stop.is_set()


class Turns:
    """When each turn is due, on any clock and in any loop: the roots at their sessions'
    starts (a closed loop's first `live` at 0, each later one as a session ends), every
    other turn as ended() says what it waits for has ended."""

    def __init__(self, sessions: SessionTree, arrival_s: np.ndarray,
                 session_ended: Callable[[int], None] = lambda session_id: None) -> None:
        self.session_ended = session_ended  # told each session whose every turn has ended
        self.tree = _Tree(sessions)
        self.done = [False] * len(self.tree.parent)
        self.events: list = []  # (time, row): turns to add once their time has come
        live, roots = sessions.live, self.tree.roots
        for i in roots if live is None else roots[:live]:
            heapq.heappush(self.events, (0.0 if live else float(arrival_s[i]), i))
        self.waiting_roots = [] if live is None else roots[live:][::-1]

    def due(self, now: float) -> List[Tuple[float, int]]:
        """The turns due by `now`, (time, row) in time order, taken."""
        out = []
        while self.events and self.events[0][0] <= now:
            out.append(heapq.heappop(self.events))
        return out

    def ended(self, i: int, t: float) -> None:
        """Turn i's last token is out (or it was rejected) at t: its sub-agents start."""
        if self.done[i]:  # rejected as it came, and the plan says so again
            return
        self.done[i] = True
        for c in self.tree.subagents[i]:
            heapq.heappush(self.events, (t + self.tree.gap[c], c))
        self._settle(i, t)

    def _settle(self, i: int, t: float) -> None:
        """One of what turn i's next turn waits for is done."""
        tree = self.tree
        tree.pending[i] -= 1
        if tree.pending[i]:
            return
        c = tree.next[i]
        if c >= 0:
            heapq.heappush(self.events, (t + tree.gap[c], c))
        else:
            self._subtree_done(i, t)

    def _subtree_done(self, i: int, t: float) -> None:
        """Turn i's subtree (its chain of next turns included) has ended at t."""
        tree = self.tree
        while True:
            p = tree.parent[i]
            if p < 0:
                break
            if tree.subagent[i]:
                self._settle(p, t)
                return
            i = p  # a next turn's subtree ends its predecessor's
        self.session_ended(self.tree.session_id[i])
        if self.waiting_roots:  # a closed loop's session ended: the next one starts
            heapq.heappush(self.events, (t, self.waiting_roots.pop()))


class _Sessions(Turns):
    def __init__(self, engine, requests, virtual: bool, recorder, step_seconds,
                 start: float) -> None:
        super().__init__(requests.sessions, requests.arrival_s, engine.end_session)
        self.engine, self.recorder, self.virtual = engine, recorder, virtual
        self.step_seconds, self.start = step_seconds, start
        self.requests = requests
        engine.sessions = requests.sessions.session_id  # each turn's, for the scheduler
        self.prompt_len = requests.prompt_len.tolist()
        self.max_new_tokens = requests.max_new_tokens.tolist()
        self.now, self.steps = 0.0, 0

    def add(self, i: int, t: float) -> None:
        """Turn i, arrived at t, enqueued now."""
        r = self.requests
        self.recorder.arrived(i, t)
        added = self.engine.add_request(
            i, prompt_len=self.prompt_len[i], max_new_tokens=self.max_new_tokens[i],
            arrival_time=t, hash_ids=None if r.hash_ids is None else r.hash_ids[i],
            hash_block_size=r.hash_block_size)
        self.recorder.enqueue(added, self.now)
        if added.status != "waiting":  # rejected (or done) as it came
            self.ended(i, self.now)

    def step(self, stop: threading.Event) -> bool:
        engine = self.engine
        if not self.virtual:
            self.now = time.perf_counter() - self.start
        while self.events and self.events[0][0] <= self.now:
            t, i = heapq.heappop(self.events)
            self.add(i, t)
        if not engine.has_unfinished():
            if self.events and self.virtual:
                self.now = max(self.now, self.events[0][0])
            elif self.events:
                stop.wait(max(0.0, self.events[0][0] - self.now))
            return False
        step_start, done = self.now, self.recorder.num_done
        record = engine.step()
        if record is None:
            return False
        self.now = self.now + self.step_seconds(record) if self.virtual \
            else time.perf_counter() - self.start
        self.recorder.step(record, step_start, self.now)
        self.steps += 1
        if self.recorder.num_done != done:  # most steps end no turn
            for i in (*record.finished.tolist(), *record.rejected.tolist()):
                self.ended(i, self.now)
        return True
