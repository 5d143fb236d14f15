"""DP ranks over torch.distributed: one process per rank, each with its own scheduler,
block pool and Worker; one all-reduce per step carries the vote.

The vote (normal engine): if any rank's prompt pass would schedule a token, every rank runs
a prompt round, and a rank with nothing to prefill runs an empty prompt step that still
joins the collectives; else every rank decodes. With mixed batches there is no vote: each
rank runs its mixed round, an empty one where it has nothing to do. The same all-reduce tells whether any rank
still has work, so idle ranks keep stepping (empty steps) until all are done.
Requests are assigned round robin by request id; every process sees every request.
`steptrace run` starts such ranks as processes of its own (harness/ranks/processes.py).
With a deployment's `moe.ep` the ranks are also one EP group (engine/ep.py): an empty step
still runs every MoE layer's all-to-alls, so the vote's empty steps keep the ranks in step.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from queue import Empty
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from . import ep
from .config import EngineConfig
from .llm_engine import LLMEngine, StepRecord

BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
ONE_ROUND = {"prompt": "prompt", "completion": "decode"}  # by engine_type


class CollectiveError(RuntimeError):
    """A collective that failed or did not complete within the process group's timeout,
    named with this rank."""


class DPEngine:
    def __init__(self, config: EngineConfig, rank: int, world_size: int,
                 group: Optional[dist.ProcessGroup] = None) -> None:
        """Rank `rank` of `world_size` DP ranks: the process group's (`group`: a group of
        them, say one P/D instance's, set once the process group is up; None: every
        process)."""
        self.rank, self.world_size, self.group = rank, world_size, group
        self.engine = LLMEngine(replace(config, scheduler=replace(config.scheduler, dp_size=1)))
        # nccl and hccl reduce device tensors; gloo host ones
        device = self.engine.device
        self._vote_device = "cpu" if device.backend == "cpu" else device.torch_device
        self.idle = False  # the last step() ran no step: no rank had work, or one stopped
        self.steps = 0  # steps run

    def shard_experts(self) -> None:
        """Expert parallelism over every rank where the deployment asks for it
        (engine/ep.py); after init_process_group, on every rank."""
        model = getattr(self.engine.executor, "model", None)
        if model is not None:
            ep.attach(model, self.engine.config.deployment, self.rank, self.world_size,
                      self.group)

    def add_request(self, request_id: int, **kwargs) -> None:
        if request_id % self.world_size == self.rank:
            self.engine.add_request(request_id, **kwargs)

    def step(self, more: bool = False,
             stop: bool = False) -> Tuple[bool, Optional[StepRecord]]:
        """(any rank still has work or may be given more, this rank's record); one
        all-reduce. `more`: this rank may still be given requests; `stop`: it was told to
        stop. No rank steps (`idle`) where none has work or any was told to stop (then all
        return False). With mixed batches there is no vote (docs/scheduling.md, 9.15): every
        rank runs its mixed round, and a plan's phase is its own rank's."""
        scheduler = self.engine.scheduler
        mixed = self.engine.config.scheduler.mixed_batches
        vote = torch.tensor([int(not mixed and scheduler.has_prompt_work()),
                             int(not scheduler.is_finished()), int(more), int(stop)],
                            device=self._vote_device)
        try:
            dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self.group)
        except RuntimeError as e:  # a rank gone, or the group's timeout passed
            raise CollectiveError(f"rank {self.rank}: the DP vote's all_reduce (after step "
                                  f"{self.steps}) did not complete: {e}") from None
        self.idle = not vote[1] or bool(vote[3])
        if self.idle:
            return bool(vote[2]) and not vote[3], None
        self.steps += 1
        if mixed:
            return True, self.engine.step(join=True)
        # a P/D instance's engine runs its one kind of round
        phase = ONE_ROUND.get(self.engine.config.scheduler.engine_type) or \
            ("prompt" if vote[0] else "decode")
        return True, self.engine.step(phase=phase)

    def run(self) -> List[StepRecord]:
        records: List[StepRecord] = []
        while True:
            busy, record = self.step()
            if not busy:
                last = self.engine.drain()
                return records + ([last] if last is not None else [])
            if record is not None:
                records.append(record)


def run_dp(config: EngineConfig, world_size: int, requests: Sequence[dict],
           summarize: Callable[[List[StepRecord]], object]) -> list:
    """Replay `requests` (add_request keyword dicts with request_id) on world_size processes;
    returns summarize(records) of each rank, in rank order. A rank that fails raises here."""
    port = _free_port()
    queue = mp.get_context("spawn").Queue()
    processes = mp.spawn(_rank_main, args=(world_size, port, config, requests, summarize, queue),
                         nprocs=world_size, join=False)
    results: Dict[int, object] = {}  # summarize()'s, by rank
    while len(results) < world_size:  # drain before joining: a child blocks on a full pipe
        try:
            rank, result = queue.get(timeout=0.5)
            results[rank] = result
        except Empty:
            processes.join(timeout=0)  # raises if a rank died
    while not processes.join():
        pass
    return [results[r] for r in range(world_size)]


def _rank_main(rank, world_size, port, config, requests, summarize, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if config.device in ("auto", "cuda") and torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())  # one device per rank
    dp = DPEngine(config, rank, world_size)
    dist.init_process_group(BACKENDS[dp.engine.device.backend], rank=rank, world_size=world_size)
    try:
        dp.shard_experts()
        for request in requests:
            dp.add_request(**request)
        queue.put((rank, summarize(dp.run())))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
