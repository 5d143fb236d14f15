"""The harness's side of a run over rank processes: the trace's requests fed to the ranks
at their arrival times on the real clock, the ranks' step-log chunks handed to the
recorder as they come (harness/ranks/processes.py). What feeds the ranks is a co-located
deployment's round robin (Colocated) or a P/D deployment's routers
(harness/ranks/pd_replay.py)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol

import numpy as np

from ..replay.driver import Requests
from .processes import POLL_S, SETTLE_S, RankFailed, Ranks


class Feeder(Protocol):
    def arrive(self, i: int, arrival_s: float) -> None:
        """Request i arrived: give it to a rank."""

    def events(self) -> None:
        """Act on the ranks' events taken since the last call."""

    def end(self, stopped: bool) -> None:
        """No more arrivals: tell the ranks (stopped: stop at once)."""


class Colocated:
    """A co-located deployment's DP ranks: request i to rank i mod N (Ranks.add)."""

    def __init__(self, ranks: Ranks, requests: Requests) -> None:
        self.ranks, self.requests = ranks, requests

    def arrive(self, i: int, arrival_s: float) -> None:
        r = self.requests
        self.ranks.add(i, prompt_len=int(r.prompt_len[i]),
                       max_new_tokens=int(r.max_new_tokens[i]), arrival_time=arrival_s,
                       hash_ids=None if r.hash_ids is None else r.hash_ids[i],
                       hash_block_size=r.hash_block_size)

    def events(self) -> None:
        """A co-located rank sends none."""

    def end(self, stopped: bool) -> None:
        self.ranks.end(stopped)


def replay_ranks(ranks: Ranks, feeder: Feeder, requests: Requests, recorder,
                 on_step: Optional[Callable[[int, int], None]], start: float,
                 stop: threading.Event) -> bool:
    """Replay to completion, or until `stop` is set (the ranks then stop together); True
    if completed. A rank that fails raises RankFailed, what the others sent recorded."""
    ranks.begin(start)
    arrivals = np.asarray(requests.arrival_s, np.float64)
    n = len(arrivals)

    def poll() -> None:
        done = ranks.num_done
        wait = arrivals[i] - (time.perf_counter() - start) if i < n else POLL_S
        ranks.poll(min(POLL_S, max(wait, 0.0)))
        feeder.events()
        recorder.take(ranks)
        if on_step is not None and ranks.num_done != done:
            on_step(ranks.num_done, n)

    i = 0
    try:
        for i in range(n):
            while not stop.is_set() and time.perf_counter() - start < arrivals[i]:
                poll()
            if stop.is_set():
                break
            feeder.arrive(i, float(arrivals[i]))
        i = n
        feeder.end(stopped=stop.is_set())
        stopped = stop.is_set()
        while not ranks.finished():
            poll()
            if stop.is_set() and not stopped:  # stopped while the ranks finish
                stopped = True
                feeder.end(stopped=True)
    except RankFailed:
        ranks.settle(SETTLE_S)
        feeder.events()  # what the others reported before they ended
        # named again once settled: a killed rank may die after its peers saw it go
        raise RankFailed(ranks.failure()) from None
    finally:  # what every rank sent, also after a failure
        recorder.take(ranks, final=True)
    if on_step is not None:
        on_step(ranks.num_done, n)
    return not stop.is_set()
