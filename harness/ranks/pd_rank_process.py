"""A DP rank of a P/D instance as an engine process, one per device of the instance
(harness/ranks/pd_replay.py feeds them): a prefill instance's `prompt` engine or a
decode instance's `completion` engine, in lockstep with its instance's other ranks alone. The KV of each prefilled
sequence moves from the prefill process to the decode process over the process group's
point-to-point send and receive (gloo, NCCL, HCCL; engine/kv_transfer.py gathers and
scatters it).

The hand-off: the prefill reports the sequence with its first token (Prefilled); the
harness's decode router picks a decode instance, tells it to add the sequence with its KV
in transfer, and tells the prefill where to send. The decode's scheduler reserves the
sequence's blocks when it admits it (backpressure: later, when it has no room); only then
does the decode post the receive, so the send completes once the blocks are reserved. The
KV lands in those blocks and the sequence decodes from the next step; the decode reports
when its transfer started and ended (Landed).

Receives from one prefill are posted in the order its sequences were added, sends in the
order they were prefilled: the one order NCCL and HCCL, which match point-to-point
messages by order alone, need. A sequence the decode rejects (or that needs no decode:
one output token) has no blocks: its KV is received and dropped, or never sent.

Messages (messages.py), beyond rank_process's: in, Add with its `source` rank and the
prefill's `first_token` to a decode, SendKV to a prefill; out, Prefilled from a prefill,
Landed and Room (when it changed) from a decode.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Deque, Dict, Optional, Union

from .messages import Add, Landed, Prefilled, Room, SendKV
from .p2p_waits import P2PWaits
from .rank_process import _Rank

if TYPE_CHECKING:
    import torch

IN_TRANSFER_POLL_S = 0.001  # an idle decode's wait while a receive is in flight


class PDRank(_Rank):
    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.role = self.setup.roles[self.rank]
        self.engine = self.dp.engine
        # prefill: KV waiting for the router's choice
        self.outgoing: Dict[int, torch.Tensor] = {}
        # decode: sequences added with their KV in transfer, by source rank, in order
        self.expected: Dict[int, Deque[int]] = {}
        # sends (their tensor kept alive), or receives (seq_id, buffer, reserved, start)
        self.transfers = P2PWaits(polled=self.engine.device.backend != "cpu")
        # decode: (prompt_len, the scheduler's record as added) of each KV expected
        self.incoming: Dict[int, tuple] = {}
        self.max_new_tokens: Dict[int, int] = {}
        self.adds = 0  # decode: the sequences the harness added here
        self.room: tuple = ()  # decode: (KV blocks to spare, adds) last reported

    def _connect_peers(self) -> None:
        """Every prefill rank and decode rank exchange one element before the run, pair
        after pair in one order on every rank (so none waits on a pair another has not
        reached). NCCL and HCCL make a pair's communicator at its first send or receive, a
        blocking exchange: made mid-run, a prefill's first send would wait for a decode
        held up by backpressure, and that decode perhaps for another pair."""
        import torch
        import torch.distributed as dist

        roles = self.setup.roles
        one = torch.zeros(1, device=self.dp.engine.device.torch_device)
        for p in (r for r, role in enumerate(roles) if role == "prefill"):
            for d in (r for r, role in enumerate(roles) if role == "decode"):
                if self.rank == p:
                    dist.send(one, d)
                elif self.rank == d:
                    dist.recv(one, p)

    def _take(self, message: Union[Add, SendKV]) -> None:
        if isinstance(message, SendKV):
            self._send(message.seq_id, message.dst)
            return
        assert isinstance(message, Add)
        request_id, kwargs = message.request_id, message.kwargs
        added = self.engine.add_request(request_id, **kwargs)
        if self.role == "prefill":  # one rejected here is in the next step's plan too
            self.log.enqueue(added, self._now())
            self.max_new_tokens[request_id] = kwargs["max_new_tokens"]
            return
        self.adds += 1
        if added.status != "waiting":  # rejected, or done: its one token is the prefill's
            self.log.enqueue(added, self._now())
        if kwargs["max_new_tokens"] > 1:  # the prefill sends its KV
            assert message.source is not None, "a decode's Add names its prefill rank"
            self.incoming[request_id] = (kwargs["prompt_len"], added)
            self.expected.setdefault(message.source, deque()).append(request_id)

    def _loop(self) -> None:
        """Steps in lockstep with the instance's other ranks (a DP vote over its group)
        until they are all done, told no more requests come and every transfer is over,
        or one was told to stop."""
        while True:
            self._receive(block=False)
            t0 = self._now()
            in_transfer = bool(self.outgoing or self.transfers.in_flight
                               or any(self.expected.values()))
            busy, record = self.dp.step(more=not self.ended or in_transfer, stop=self.stopped)
            ran = record is not None and self._stepped(record, t0, self._now())
            if not self.stopped:  # a stopped peer's transfers fail: no failure of this run's
                self._progress()
            if not busy:
                return
            self._check_harness()
            if self.dp.idle:
                self._receive(block=True)
            elif not ran and self.transfers.in_flight:  # its sequences wait for their KV
                # (the instance's other ranks wait for this one at the next vote)
                self._receive(block=True, timeout=IN_TRANSFER_POLL_S)

    def _stepped(self, record, t0: float, t1: float) -> bool:
        """The step recorded, unless this instance is one rank and the step ran no row (it
        only admitted reservations: the engine's time is not in it; an instance of several
        ranks records every lockstep step, as a co-located one does); the prefill's
        hand-offs reported. True if it ran a row."""
        from engine.kv_transfer import handed_off

        ran = bool(len(record.post.output_len) or len(record.preempted)
                   or len(record.rejected) or len(record.post.finished))
        if ran or self.dp.world_size > 1:
            self.log.record(record, t0, t1)
        if self.role == "decode":
            self._free_blocks()
            return ran
        for seq_id in record.rejected.tolist():
            self._report(seq_id, None)
        for seq_id, h in handed_off(self.engine, record, self._moves).items():
            if h.kv is not None:
                self.outgoing[seq_id] = h.kv
            self._report(seq_id, h.first_token, 0 if h.kv is None else h.kv.nbytes, t1)
        return ran

    def _moves(self, seq_id: int) -> bool:
        """Whether a handed-off sequence's KV moves: one output token is the prefill's."""
        return self.max_new_tokens[seq_id] > 1

    def _free_blocks(self) -> None:
        """The decode's KV blocks to spare (free, less the prompt blocks of the sequences
        added and not yet admitted) and how many sequences it was added, when they changed
        (the least_kv router's)."""
        from engine._core import awaited_blocks

        waiting = [self.incoming[s][0] for queue in self.expected.values() for s in queue
                   if self._status(s) == "waiting"]
        room = (self.engine.scheduler.num_free_blocks(0)
                - awaited_blocks(waiting, self.engine.config.scheduler.block_size), self.adds)
        if room != self.room:
            self.room = room
            self.outbox.put(Room(self.rank, *room))

    def _report(self, seq_id: int, first_token: Optional[int], nbytes: int = 0,
                t: Optional[float] = None) -> None:
        self.outbox.put(Prefilled(self.rank, seq_id, first_token, nbytes,
                         self._now() if t is None else t))
        self.max_new_tokens.pop(seq_id, None)

    def _send(self, seq_id: int, dst: int) -> None:
        import torch.distributed as dist

        kv = self.outgoing.pop(seq_id)
        self.transfers.add(dst, dist.isend(kv, dst), kv)

    def _progress(self) -> None:
        """Sends completed let go; receives posted for admitted sequences (each source's
        in order); completed ones put into their blocks and reported."""
        if self.role == "prefill":
            self.transfers.completed()
            return
        self._post_receives()
        for seq_id, buffer, reserved, start in self.transfers.completed():
            self._land(seq_id, buffer, reserved, start)

    def _post_receives(self) -> None:
        import torch.distributed as dist

        from engine.kv_transfer import receive_buffer

        for src, queue in self.expected.items():
            while queue:
                seq_id = queue[0]
                status = self._status(seq_id)
                if status == "waiting":  # not admitted: no blocks reserved yet
                    break
                queue.popleft()
                buffer = receive_buffer(self.engine, self.incoming[seq_id][0])
                self.transfers.add(src, dist.irecv(buffer, src),
                                   (seq_id, buffer, status == "running", self._now()))

    def _status(self, seq_id: int) -> str:
        """The decode scheduler's status of a sequence added with its KV in transfer
        (running: admitted, its blocks reserved; gone: it left, rejected)."""
        from engine import _core

        try:
            return self.engine.scheduler.seq(seq_id).status
        except _core.SequenceLeft:
            return "gone"

    def _land(self, seq_id: int, buffer, reserved: bool, start: float) -> None:
        from engine.kv_transfer import receive

        _, added = self.incoming.pop(seq_id)
        if reserved:  # else rejected: the KV is dropped
            receive(self.engine, seq_id, buffer)
            end = self._now()
            # enqueued as the user sees it: its first token is out once its KV has arrived
            self.log.enqueue(added, end)
            self.outbox.put(Landed(self.rank, seq_id, start, end))
