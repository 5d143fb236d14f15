"""The harness's side of a run over rank processes: the trace's requests fed to the ranks
at their arrival times on the real clock, the ranks' step-log chunks handed to the
recorder as they come (harness/replay/ranks.py)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np

from .driver import Requests
from .ranks import POLL_S, SETTLE_S, RankFailed, Ranks


def replay_ranks(ranks: Ranks, requests: Requests, recorder,
                 on_step: Optional[Callable[[int, int], None]], start: float,
                 stop: threading.Event) -> bool:
    """Replay to completion, or until `stop` is set (the ranks then stop together); True
    if completed. A rank that fails raises RankFailed, what the others sent recorded."""
    ranks.begin(start)
    arrivals = np.asarray(requests.arrival_s, np.float64)
    n = len(arrivals)
    try:
        for i in range(n):
            while not stop.is_set() and time.perf_counter() - start < arrivals[i]:
                wait = arrivals[i] - (time.perf_counter() - start)
                ranks.poll(min(POLL_S, max(wait, 0.0)))
                recorder.take(ranks)
            if stop.is_set():
                break
            ranks.add(i, prompt_len=int(requests.prompt_len[i]),
                      max_new_tokens=int(requests.max_new_tokens[i]),
                      arrival_time=float(arrivals[i]),
                      hash_ids=None if requests.hash_ids is None else requests.hash_ids[i],
                      hash_block_size=requests.hash_block_size)
            if on_step is not None and i % 64 == 0:
                on_step(ranks.num_done, n)
        ranks.end(stopped=stop.is_set())
        stopped = stop.is_set()
        while not ranks.finished():
            done = ranks.num_done
            ranks.poll(POLL_S)
            recorder.take(ranks)
            if on_step is not None and ranks.num_done != done:
                on_step(ranks.num_done, n)
            if stop.is_set() and not stopped:  # stopped while the ranks finish
                stopped = True
                ranks.end(stopped=True)
    except RankFailed:
        ranks.settle(SETTLE_S)
        raise
    finally:  # what every rank sent, also after a failure
        recorder.take(ranks, final=True)
    if on_step is not None:
        on_step(ranks.num_done, n)
    return not stop.is_set()
