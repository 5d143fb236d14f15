"""The harness's side of a P/D deployment on a real device: every instance engine
processes, one per device (harness/replay/pd_rank_process.py), the prefill instances'
ranks first. The harness replays the trace on the real clock through the
prefill router, routes each prefilled sequence through the decode router (telling the
decode instance to take it and the prefill where to send its KV), records each hand-off
and transfer in the requests table's P/D columns, and hands the ranks' chunks to the
recorder. Within an instance, requests go to its DP ranks round robin (as an engine's DP
dispatch does). The decode instances are told that no more requests come once every prefill
instance has finished and reported its last hand-off."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np

from engine.block_hashes import block_hashes

from ..record.pd_join import Transfers
from .driver import Requests
from .ranks import POLL_S, SETTLE_S, RankFailed, Ranks
from .routers import DecodeRouter, PrefillRouter


class _Service:
    def __init__(self, service, ranks: Ranks, requests: Requests, transfers: Transfers):
        self.service, self.ranks, self.requests = service, ranks, requests
        self.transfers = transfers
        self.p = service.prefill.instances
        self.groups = ranks.groups  # each instance's ranks, prefill instances first
        self.instance = {r: k for k, g in enumerate(self.groups) for r in g}
        self._next = [0] * len(self.groups)  # each instance's next DP rank
        prefill = ranks.engines[0].config.scheduler
        self.block_size = prefill.block_size
        self.prefill_router = PrefillRouter(service.prefill_router, self.p,
                                            len(self.groups[0]) * prefill.num_kv_blocks,
                                            prefill.block_size)
        self.decode_router = DecodeRouter(service.decode_router, service.decode.instances)
        self.free = {r: e.kv_pool.manifest()["num_kv_blocks"] if e.kv_pool is not None
                     else e.config.scheduler.num_kv_blocks for r, e in enumerate(ranks.engines)}
        self.prompt_len = np.asarray(requests.prompt_len, np.int64)
        self.max_new_tokens = np.asarray(requests.max_new_tokens, np.int64)

    def arrive(self, i: int, arrival_s: float) -> None:
        r = self.requests
        prompt_len = int(self.prompt_len[i])
        ids = None if r.hash_ids is None else r.hash_ids[i]
        hashes = block_hashes(ids, r.hash_block_size or self.block_size, self.block_size,
                              prompt_len) \
            if ids is not None and self.service.prefill_router == "cache_aware" else ()
        k = self.prefill_router.route(prompt_len, hashes)
        self.transfers["prefill_instance"][i] = k
        self.ranks.send(self._dp_rank(k), ("add", i, dict(
            prompt_len=prompt_len, max_new_tokens=int(self.max_new_tokens[i]),
            arrival_time=arrival_s, hash_ids=ids, hash_block_size=r.hash_block_size)))

    def events(self) -> None:
        """The ranks' hand-offs, transfers and free blocks, in the order they came."""
        events, self.ranks.events = self.ranks.events, []
        for kind, rank, *rest in events:
            if kind == "prefilled":
                self._prefilled(rank, *rest)
            elif kind == "kv":
                seq_id, start, end = rest
                t = self.transfers
                t["transfer_start_s"][seq_id], t["transfer_end_s"][seq_id] = start, end
                t["decode_wait_s"][seq_id] = start - t["handoff_s"][seq_id]
            elif kind == "free":
                self.free[rank] = rest[0]

    def _dp_rank(self, instance: int) -> int:
        """The rank of `instance` that takes its next request."""
        group = self.groups[instance]
        rank = group[self._next[instance]]
        self._next[instance] = (self._next[instance] + 1) % len(group)
        return rank

    def _prefilled(self, rank: int, seq_id: int, first_token: Optional[int], nbytes: int,
                   t: float) -> None:
        self.prefill_router.prefilled(self.instance[rank], int(self.prompt_len[seq_id]))
        if first_token is None:  # rejected by the prefill
            return
        self.transfers["kv_bytes"][seq_id] = nbytes
        self.transfers["handoff_s"][seq_id] = t
        j = self.decode_router.route([sum(self.free[r] for r in g)
                                      for g in self.groups[self.p:]])
        self.transfers["decode_instance"][seq_id] = j
        decode = self._dp_rank(self.p + j)
        max_new_tokens = int(self.max_new_tokens[seq_id])
        self.ranks.send(decode, ("add", seq_id, dict(
            prompt_len=int(self.prompt_len[seq_id]), max_new_tokens=max_new_tokens,
            arrival_time=t, kv_transfer=True, first_token=first_token), rank))
        if max_new_tokens > 1:  # one output token: the prefill's, nothing to decode
            self.ranks.send(rank, ("send", seq_id, decode))

    @property
    def prefill_ranks(self) -> list:
        return [r for g in self.groups[:self.p] for r in g]

    @property
    def decode_ranks(self) -> list:
        return [r for g in self.groups[self.p:] for r in g]

    def prefill_done(self) -> bool:
        return all(r in self.ranks.done for r in self.prefill_ranks)


def replay_pd_ranks(service, ranks: Ranks, requests: Requests, recorder,
                    on_step: Optional[Callable[[int, int], None]], start: float,
                    stop: threading.Event) -> bool:
    """Replay to completion, or until `stop` is set (every instance then stops); True if
    completed. A rank that fails raises RankFailed, what the others sent recorded."""
    assert recorder.join is not None, "a P/D deployment's recorder joins its requests"
    run = _Service(service, ranks, requests, recorder.join.transfers)
    ranks.begin(start)
    arrivals = np.asarray(requests.arrival_s, np.float64)
    n = len(arrivals)

    def poll(timeout: float) -> None:
        ranks.poll(timeout)
        run.events()
        recorder.take(ranks)

    try:
        for i in range(n):
            while not stop.is_set() and time.perf_counter() - start < arrivals[i]:
                poll(min(POLL_S, max(arrivals[i] - (time.perf_counter() - start), 0.0)))
            if stop.is_set():
                break
            run.arrive(i, float(arrivals[i]))
            if on_step is not None and i % 64 == 0:
                on_step(ranks.num_done, n)
        _drain(run, ranks, poll, on_step, n, stop)
    except RankFailed:
        ranks.settle(SETTLE_S)
        raise
    finally:  # what every rank sent, also after a failure
        recorder.take(ranks, final=True)
    if on_step is not None:
        on_step(ranks.num_done, n)
    return not stop.is_set()


def _drain(run: _Service, ranks: Ranks, poll, on_step, n: int, stop) -> None:
    """No more arrivals: the prefill instances finish theirs, then the decode instances
    (every hand-off routed: a prefill reports its last before it is done)."""
    prefill, decode = run.prefill_ranks, run.decode_ranks
    ranks.end(stopped=stop.is_set(), ranks=prefill)
    decode_told = stopped = stop.is_set()
    if stopped:
        ranks.end(stopped=True, ranks=decode)
    while not ranks.finished():
        done = ranks.num_done
        poll(POLL_S)
        if not decode_told and run.prefill_done():
            run.events()  # the last hand-offs, before the decode hears there are no more
            ranks.end(stopped=False, ranks=decode)
            decode_told = True
        if on_step is not None and ranks.num_done != done:
            on_step(ranks.num_done, n)
        if stop.is_set() and not stopped:
            stopped = decode_told = True
            ranks.end(stopped=True)
