"""The harness's side of a P/D deployment on a real device: every instance engine
processes, one per device (harness/ranks/pd_rank_process.py), the prefill instances'
ranks first. The harness replays the trace on the real clock (replay.py) through the
prefill router, routes each prefilled sequence through the decode router (telling the
decode instance to take it and the prefill where to send its KV), records each hand-off
and transfer in the requests table's P/D columns, and hands the ranks' chunks to the
recorder. Within an instance, requests go to its DP ranks round robin (as an engine's DP
dispatch does). The decode instances are told that no more requests come once every prefill
instance has finished and reported its last hand-off."""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, Optional, Tuple

import numpy as np

from engine._core import DecodeRouter, PrefillRouter, awaited_blocks

from ..replay.driver import Requests
from .messages import Add, Landed, Prefilled, Room, SendKV
from .pd_join import Transfers
from .processes import Ranks


class PDFeeder:
    """A P/D deployment's routers in front of its instances' ranks (a Feeder of
    harness/ranks/replay.py)."""

    def __init__(self, service, ranks: Ranks, requests: Requests, transfers: Transfers):
        self.service, self.ranks, self.requests = service, ranks, requests
        self.transfers = transfers
        self.p = service.prefill.instances
        self.groups = ranks.groups  # each instance's ranks, prefill instances first
        self.instance = {r: k for k, g in enumerate(self.groups) for r in g}
        self._next = [0] * len(self.groups)  # each instance's next DP rank
        # each rank's KV blocks to spare: its whole pool, then as it reports them
        self.free = {r: e.config.scheduler.num_kv_blocks for r, e in enumerate(ranks.engines)}
        # each decode rank's sequences added, and (add's index, prompt blocks) of those it
        # had not counted in its last report
        self.adds = {r: 0 for r in self.decode_ranks}
        self.unreported: Dict[int, Deque[Tuple[int, int]]] = {
            r: deque() for r in self.decode_ranks}
        self.prefill_router = PrefillRouter(service.prefill_router, self.p,
                                            sum(self.free[r] for r in self.groups[0]),
                                            ranks.engines[0].config.scheduler.block_size)
        self.decode_router = DecodeRouter(service.decode_router, service.decode.instances)
        self.prefill_ended = self.decode_told = False
        self.prompt_len = np.asarray(requests.prompt_len, np.int64)
        self.max_new_tokens = np.asarray(requests.max_new_tokens, np.int64)

    def arrive(self, i: int, arrival_s: float) -> None:
        r = self.requests
        prompt_len = int(self.prompt_len[i])
        ids = None if r.hash_ids is None else r.hash_ids[i]
        k = self.prefill_router.route(prompt_len, self.prefill_router.hashes(
            ids, r.hash_block_size, prompt_len))
        self.transfers["prefill_instance"][i] = k
        self.ranks.send(self._dp_rank(k), Add(i, dict(
            prompt_len=prompt_len, max_new_tokens=int(self.max_new_tokens[i]),
            arrival_time=arrival_s, hash_ids=ids, hash_block_size=r.hash_block_size)))

    def events(self) -> None:
        """The ranks' hand-offs, transfers and free blocks, in the order they came; the
        decode instances told no more requests come once the prefill ranks are done (a
        prefill reports its last hand-off before it is done)."""
        self._take_events()
        if not self.decode_told and self.prefill_ended and self.prefill_done():
            self.ranks.end(stopped=False, ranks=self.decode_ranks)
            self.decode_told = True

    def end(self, stopped: bool) -> None:
        """The prefill ranks finish theirs (the decode ranks theirs after them), or all
        stop."""
        self.prefill_ended = True
        self.ranks.end(stopped, ranks=None if stopped else self.prefill_ranks)
        self.decode_told = stopped

    def _take_events(self) -> None:
        events, self.ranks.events = self.ranks.events, []
        for event in events:
            if isinstance(event, Prefilled):
                self._prefilled(*event)
            elif isinstance(event, Landed):
                seq_id, start = event.seq_id, event.start
                t = self.transfers
                t["transfer_start_s"][seq_id], t["transfer_end_s"][seq_id] = start, event.end
                t["decode_wait_s"][seq_id] = start - t["handoff_s"][seq_id]
            elif isinstance(event, Room):
                self.free[event.rank] = event.blocks
                unreported = self.unreported[event.rank]
                while unreported and unreported[0][0] < event.adds:
                    unreported.popleft()

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
        j = self.decode_router.route([sum(self._room(r) for r in g)
                                      for g in self.groups[self.p:]])
        self.transfers["decode_instance"][seq_id] = j
        decode = self._dp_rank(self.p + j)
        max_new_tokens = int(self.max_new_tokens[seq_id])
        if max_new_tokens > 1:  # its KV moves: blocks are reserved for it there
            self.unreported[decode].append((self.adds[decode], awaited_blocks(
                [int(self.prompt_len[seq_id])], self.ranks.engines[decode].config.scheduler.block_size)))
        self.adds[decode] += 1
        self.ranks.send(decode, Add(seq_id, dict(
            prompt_len=int(self.prompt_len[seq_id]), max_new_tokens=max_new_tokens,
            arrival_time=t, kv_transfer=True, first_token=first_token), rank))
        if max_new_tokens > 1:  # one output token: the prefill's, nothing to decode
            self.ranks.send(rank, SendKV(seq_id, decode))

    def _room(self, rank: int) -> int:
        """A decode rank's KV blocks to spare: as it last reported them, less the prompt
        blocks of the sequences added since."""
        return self.free[rank] - sum(blocks for _, blocks in self.unreported[rank])

    @property
    def prefill_ranks(self) -> list:
        return [r for g in self.groups[:self.p] for r in g]

    @property
    def decode_ranks(self) -> list:
        return [r for g in self.groups[self.p:] for r in g]

    def prefill_done(self) -> bool:
        return all(r in self.ranks.done for r in self.prefill_ranks)
