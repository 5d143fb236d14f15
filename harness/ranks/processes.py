"""A run over several devices of a real device: one engine process per device (a DP
attention rank each, harness/ranks/rank_process.py), started with torch.multiprocessing's
spawn on this host; rank r uses local device r mod the host's devices. The process group
is gloo on the CPU, NCCL on CUDA, HCCL on an NPU, its rendezvous at MASTER_ADDR and
MASTER_PORT (default: this host, a free port).

The harness's process replays the trace on the real clock and feeds each request to a
rank's inbox, round robin by request id (arrival order), as the in-process DP dispatch's
round_robin does; every rank sends its step log's columns back, and the harness's one
table writer writes them (harness/ranks/recorder.py). A rank that fails or dies
fails the run: the others are stopped, what ran is written, the run marked failed.
"""

from __future__ import annotations

import os
import queue
import socket
import time
from dataclasses import replace
from typing import Dict, List, Optional, Sequence

import numpy as np

from engine.devices import detect_device

from ..schema.tables import REQUESTS
from ..workload import Workload
from ..workload.real_deployment import rendezvous
from .messages import Add, Begin, Chunk, Done, End, Event, Failed, Inbox, Ready
from .rank_main import rank_main
from .rank_process import RankSetup

UNFINISHED, HANDED_OFF = (REQUESTS.column("status").code(s) for s in ("unfinished", "handed_off"))
READY_TIMEOUT_S = 600.0  # a rank's start-up: the model built, the group joined
POLL_S = 0.05
SETTLE_S = 5.0  # after a failure, the other ranks' time to send what they ran


class RankFailed(RuntimeError):
    """A rank process failed or died; the message names it."""


class _Pool:
    """A rank process's KV pool as it reported it (the manifest's)."""

    def __init__(self, manifest: dict) -> None:
        self._manifest = manifest

    def manifest(self) -> dict:
        return self._manifest


class RankedEngine:
    """What the run's manifest, recorder, sampler and summary read of an engine, for
    engines that live in the rank processes."""

    def __init__(self, config, kv_pool: Optional[dict]) -> None:
        # its pool as the rank sized it (`auto` on a device), as LLMEngine's config has it
        self.config = config if kv_pool is None else replace(config, scheduler=replace(
            config.scheduler, num_kv_blocks=kv_pool["num_kv_blocks"]))
        self.device = detect_device(config.device)
        self.device_profile = None  # a torch device: its steps are measured
        self.peak_tflops = None
        self.kv_pool = _Pool(kv_pool) if kv_pool is not None else None

    def close(self) -> None:
        """The ranks are closed by their Ranks."""


class Ranks:
    """The rank processes of one run, from their start to their end."""

    def __init__(self, configs: Sequence, roles: Sequence[str],
                 groups: Sequence[Sequence[int]], workload: Workload, chunk_steps: int) -> None:
        """Rank r runs configs[r] as roles[r]: `colocated` (a DP rank of one engine over
        every rank), or `prefill` / `decode` (a DP rank of a P/D instance); `groups`: each
        instance's ranks."""
        import torch.multiprocessing as mp  # torch only where ranks run

        ctx = mp.get_context("spawn")
        self.world_size = world_size = len(configs)
        self.outbox = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(world_size)]
        # the ranks' other messages (a P/D hand-off's), in their order, for the replay
        self.events: List[Event] = []
        self.groups = tuple(tuple(g) for g in groups)
        self.roles = tuple(roles)
        addr, port = rendezvous(os.environ)  # checked when the workload loaded
        setup = RankSetup(tuple(configs), self.roles, self.groups, world_size, addr,
                          port or _free_port(),
                          workload.collective_timeout_s, workload.warmup_steps, chunk_steps,
                          workload.tokens)
        self.processes = [ctx.Process(target=rank_main, args=(r, setup, inbox, self.outbox),
                                      name=f"steptrace-rank{r}", daemon=True)
                          for r, inbox in enumerate(self.inboxes)]
        self.chunks: List[List[tuple]] = [[] for _ in range(world_size)]
        self.done: Dict[int, Done] = {}  # by rank
        self.failures: Dict[int, str] = {}
        self.num_done = 0  # requests finished or rejected, of the chunks received
        for p in self.processes:
            p.start()
        try:
            pools = self._ready()
        except BaseException:
            self.close()
            raise
        self.engines = [RankedEngine(c, pools[r]) for r, c in enumerate(configs)]
        self.engine = self.engines[0]

    @property
    def pids(self) -> List[Optional[int]]:
        return [p.pid for p in self.processes]

    def _ready(self) -> Dict[int, Optional[dict]]:
        """Each rank's KV pool manifest, once every rank is up."""
        pools: Dict[int, Optional[dict]] = {}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(pools) < self.world_size:
            message = self._get(POLL_S)
            if isinstance(message, Ready):
                pools[message.rank] = message.kv_pool
            self.check()
            if time.monotonic() > deadline:
                missing = sorted(set(range(self.world_size)) - set(pools))
                raise RankFailed(f"ranks {missing} did not start within {READY_TIMEOUT_S:g} s")
        return pools

    def begin(self, start: float) -> None:
        """The replay's zero (perf_counter: CLOCK_MONOTONIC, one clock per host) to every
        rank; they step from now."""
        for inbox in self.inboxes:
            inbox.put(Begin(start))

    def add(self, request_id: int, **kwargs) -> None:
        self.inboxes[request_id % self.world_size].put(Add(request_id, kwargs))

    def send(self, rank: int, message: Inbox) -> None:
        self.inboxes[rank].put(message)

    def end(self, stopped: bool, ranks: Optional[Sequence[int]] = None) -> None:
        """No more requests: the ranks (all, or those named) finish theirs; or (stopped)
        stop at once."""
        for rank in range(self.world_size) if ranks is None else ranks:
            self.inboxes[rank].put(End(stopped))

    def finished(self) -> bool:
        return len(self.done) == self.world_size

    def poll(self, timeout: float) -> None:
        """Take the ranks' messages for up to `timeout` s (at least one look), or until an
        event (a P/D hand-off's) is there to act on; a failed or dead rank raises
        RankFailed."""
        deadline = time.monotonic() + timeout
        while True:
            message = self._get(max(0.0, min(POLL_S, deadline - time.monotonic())))
            self.check()
            if self.events or message is None and time.monotonic() >= deadline:
                return

    def _get(self, timeout: float):
        try:
            message = self.outbox.get(timeout=timeout) if timeout > 0 \
                else self.outbox.get_nowait()
        except queue.Empty:
            return None
        if isinstance(message, Chunk):
            self.chunks[message.rank].append(message.columns)
            status = np.asarray(message.columns[2]["status"])
            done = status != UNFINISHED
            if self.roles[message.rank] == "prefill":  # its hand-offs are the decode's to end
                done &= status != HANDED_OFF
            self.num_done += int(np.count_nonzero(done))
        elif isinstance(message, Done):
            self.done[message.rank] = message
        elif isinstance(message, Failed):
            self.failures[message.rank] = message.reason
        elif not isinstance(message, Ready):
            self.events.append(message)
        return message

    def check(self) -> None:
        """RankFailed naming the first rank that reported a failure or died."""
        self._reap()
        if self.failures:
            raise RankFailed(self.failure())

    def _reap(self) -> None:
        """A rank that died without reporting, counted failed (what it sent first taken)."""
        for rank, p in enumerate(self.processes):
            if rank not in self.failures and p.exitcode not in (None, 0):
                self._drain()
            if rank not in self.failures and p.exitcode not in (None, 0):
                self.failures[rank] = f"exited with code {p.exitcode}" + (
                    f" (signal {-p.exitcode})" if p.exitcode < 0 else "")

    def failure(self) -> str:
        """The failure first to name: a rank that failed of itself before one that saw a
        collective fail (a consequence); the others', and the ranks still running (a rank
        that hangs), after it. A rank that died since is counted first."""
        self._reap()
        order = sorted(self.failures, key=lambda r: (
            self.failures[r].startswith("CollectiveError"), r))
        rank, others = order[0], [f"rank {r}: {self.failures[r]}" for r in order[1:]]
        running = [r for r, p in enumerate(self.processes)
                   if r not in self.failures and r not in self.done and p.is_alive()]
        if running:
            others.append(f"still running, not reporting: rank "
                          f"{', '.join(map(str, running))}")
        return f"rank {rank} of {self.world_size} failed: {self.failures[rank]}" + (
            f" ({'; '.join(others)})" if others else "")

    def settle(self, seconds: float) -> None:
        """After a failure: up to `seconds` for the other ranks to send what they ran (a
        rank whose collective lost its peer fails at once; a hung one never reports)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(
                p.is_alive() and r not in self.failures and r not in self.done
                for r, p in enumerate(self.processes)):
            try:
                self.poll(POLL_S)
            except RankFailed:
                pass

    def _drain(self) -> None:
        """What a dead rank (or another) sent before it went."""
        while self._get(POLL_S) is not None:
            pass

    def close(self) -> None:
        """Every rank process ended: those still running killed (after a failure)."""
        for p in self.processes:
            if p.is_alive():
                p.kill()
        for p in self.processes:
            p.join(timeout=30)


def local_devices(backend: str, world_size: int) -> List[int]:
    """The host's devices the ranks use: rank r's is r mod the host's count."""
    import torch

    # torch.npu: registered by torch_npu (the engine's device detection imported it)
    count = torch.cuda.device_count() if backend == "cuda" else \
        torch.npu.device_count()  # type: ignore[attr-defined]
    return sorted({r % count for r in range(world_size)})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
