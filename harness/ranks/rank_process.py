"""One engine process of a run over several devices (harness/ranks/processes.py starts them):
a DP rank (engine/dp.py's DPEngine: its scheduler, block pool and Worker) stepping in
lockstep with the others, fed requests by the harness through its inbox, recording its
steps in a step log of its own and sending each chunk of columns, then its tokens, to the
harness through the outbox.

Its messages are messages.py's: in, Begin, then Add and End; out, Ready, Chunk and Done (a
P/D instance's rank more: pd_rank_process.py).
"""

from __future__ import annotations

import importlib.util
import os
import queue
import time
from datetime import timedelta
from typing import NamedTuple, Tuple, Union

import numpy as np

from engine.config import EngineConfig

from .messages import Add, Begin, Chunk, Done, End, Ready, SendKV

IDLE_POLL_S = 0.01  # an idle rank's wait for a request before it votes again


class RankSetup(NamedTuple):
    """What every rank process is started with."""

    configs: Tuple[EngineConfig, ...]  # rank r's engine: configs[r]
    roles: Tuple[str, ...]  # rank r's: colocated (a DP rank), or a P/D instance's role
    # each instance's ranks, its DP ranks in order: one of every rank (co-located), or a
    # P/D deployment's instances
    groups: Tuple[Tuple[int, ...], ...]
    world_size: int
    master_addr: str
    master_port: int
    timeout_s: float  # the process group's: a collective not completed by then fails
    warmup_steps: int
    chunk_steps: int
    tokens: bool  # the run writes its tokens table: each rank sends its tokens at its end


class HarnessGone(RuntimeError):
    """The harness process was killed outright: its ranks end."""


class _Rank:
    """A DP rank of a co-located deployment (PDRank: a DP rank of a P/D instance)."""

    def __init__(self, rank: int, setup: RankSetup, inbox, outbox, harness: int) -> None:
        import torch
        import torch.distributed as dist

        from engine import _core
        from engine.dp import BACKENDS, DPEngine

        self.rank, self.setup, self.inbox, self.outbox = rank, setup, inbox, outbox
        self.harness = harness
        config = setup.configs[rank]
        if config.device in ("auto", "npu") and importlib.util.find_spec("torch_npu"):
            import torch_npu  # noqa: F401  (registers torch.npu)
        if config.device in ("auto", "cuda") and torch.cuda.is_available():
            torch.cuda.set_device(rank % torch.cuda.device_count())  # local device
        elif config.device in ("auto", "npu") and hasattr(torch, "npu"):
            torch.npu.set_device(rank % torch.npu.device_count())
        else:  # the ranks share the host's cores: one intra-op pool each would oversubscribe
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // setup.world_size))
        ranks = next(g for g in setup.groups if rank in g)  # this one's instance
        self.dp = DPEngine(config, ranks.index(rank), len(ranks))
        os.environ.update(MASTER_ADDR=setup.master_addr, MASTER_PORT=str(setup.master_port))
        dist.init_process_group(BACKENDS[self.dp.engine.device.backend], rank=rank,
                                world_size=setup.world_size,
                                timeout=timedelta(seconds=setup.timeout_s))
        if len(setup.groups) > 1:  # each instance a group (every process makes every one)
            groups = [dist.new_group(list(g)) for g in setup.groups]
            self.dp.group = groups[setup.groups.index(ranks)]
        self.dp.shard_experts()  # the EP group: collective, every rank before its first step
        self._connect_peers()
        self.log = _core.StepLog(setup.warmup_steps, setup.chunk_steps, self.flush, handoff="row"
                                 if config.scheduler.engine_type == "prompt" else "none")
        pool = self.dp.engine.kv_pool
        outbox.put(Ready(rank, pool.manifest() if pool is not None else None))
        # perf_counter() of the replay's zero: CLOCK_MONOTONIC, one clock on a host
        self.start: float = self._first_message().start
        self.ended = self.stopped = False

    def _connect_peers(self) -> None:
        """Nothing: a co-located rank meets its peers in collectives alone."""

    def run(self) -> None:
        try:
            self._loop()
        finally:  # what ran, also when a collective failed: the harness writes it
            self.log.end()
            self.flush()
        self.outbox.put(Done(self.rank, self.log.itl(),
                         self.dp.engine.output_tokens() if self.setup.tokens else {}))

    def close(self) -> None:
        import torch.distributed as dist

        self.dp.engine.close()
        dist.destroy_process_group()

    def _loop(self) -> None:
        """Steps in lockstep until every rank is done and was told no more requests come,
        or one was told to stop."""
        while True:
            self._receive(block=False)
            t0 = self._now()
            busy, record = self.dp.step(more=not self.ended, stop=self.stopped)
            if self.dp.idle:  # with overlap, the plan still in flight
                record = self.dp.engine.drain()
            if record is not None:
                self.log.record(record, t0, self._now())
            if not busy:
                return
            self._check_harness()
            if self.dp.idle:
                self._receive(block=True)

    def _receive(self, block: bool, timeout: float = IDLE_POLL_S) -> None:
        """Take the messages in the inbox (waiting up to `timeout` for one if `block`)."""
        while True:
            try:
                message = self.inbox.get(timeout=timeout) if block \
                    else self.inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            if isinstance(message, End) and message.stopped:
                self.stopped = True
            elif isinstance(message, End):
                self.ended = True
            else:
                self._take(message)

    def _take(self, message: Union[Add, SendKV]) -> None:
        assert isinstance(message, Add), "a co-located rank sends no KV"
        added = self.dp.engine.add_request(message.request_id, **message.kwargs)
        self.log.enqueue(added, self._now())

    def _first_message(self) -> Begin:
        while True:
            try:
                return self.inbox.get(timeout=IDLE_POLL_S * 10)
            except queue.Empty:
                self._check_harness()

    def _check_harness(self) -> None:
        if os.getppid() != self.harness:
            raise HarnessGone("the harness process is gone")

    def flush(self) -> None:
        """The step log's columns to the harness, as this rank's."""
        chunk = tuple(_as_rank(self.dp.rank, columns) for columns in (
            self.log.take_steps(), self.log.take_batches(), self.log.take_requests()))
        self.outbox.put(Chunk(self.rank, chunk))

    def _now(self) -> float:
        return time.perf_counter() - self.start


def _as_rank(rank: int, columns: dict) -> dict:
    """A rank process's scheduler is a one-rank one: its rows are this rank's."""
    if "dp_rank" in columns:  # -1: a request never scheduled
        ranks = np.asarray(columns["dp_rank"])
        columns["dp_rank"] = np.where(ranks < 0, ranks, rank).astype(ranks.dtype)
    return columns
