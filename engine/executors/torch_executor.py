"""The real forward: one DeepSeek-style model, one Worker (and KV cache) per DP rank; with
`num_kv_blocks: auto` the caches are sized from device memory (engine/kv_pool.py)."""

from __future__ import annotations

from typing import Dict, Final, List

import torch

from ..config import EngineConfig
from ..devices import detect_device
from ..flops import FlopsEstimator
from ..kv_pool import size_kv_pool
from ..model import DeepSeekModel
from ..model_config import ModelConfig
from ..plan import PlanContract
from ..step_parts import PARTS
from ..worker import Worker
from .base import ExecutorOutput
from .spec import Built

DTYPE_BYTES = {"float64": 8.0, "float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


def forward_dtype(config: EngineConfig) -> str:
    """The forward's dtype: float64 for greedy sampling (its argmax then does not flip with
    the summation order a batch's shape picks), else the configured one."""
    return "float64" if config.sampling == "greedy" else config.dtype


def build(config: EngineConfig, spec, model_config: ModelConfig) -> Built:
    """The model on config.device; weights and KV at the run's dtype."""
    element = DTYPE_BYTES[forward_dtype(config)]
    flops = FlopsEstimator(model_config, weight_bytes=element, kv_bytes=element)
    device = detect_device(config.device)
    executor = TorchExecutor(config, model_config, device.torch_device)
    return Built(executor, flops, device, kv_pool=executor.kv_pool)


class TorchExecutor:
    holds_requests: Final = True  # token ids and KV per request: finished ones must be dropped

    def __init__(self, config: EngineConfig, model_config: ModelConfig, device: torch.device) -> None:
        sched = config.scheduler
        self.device = device
        self.model = DeepSeekModel(model_config, seed=config.seed).to(
            device=device, dtype=getattr(torch, forward_dtype(config))).eval()
        # sized with the weights resident, before any Worker holds a cache
        self.kv_pool = size_kv_pool(self.model, device, config)
        # greedy: drafts verified against the model, never accepted by the seeded model
        acceptance = None if config.sampling == "greedy" else config.mtp_acceptance
        self.workers = [Worker(self.model, self.kv_pool.num_kv_blocks, sched.block_size,
                               sched.num_mtp, acceptance, seed=config.seed + rank,
                               device=device, keep_outputs=config.keep_tokens)
                        for rank in range(sched.dp_size)]
        # Each request's rank, from add() to drop(): dropping a request needs nothing from
        # the scheduler, which may have released it already.
        self._rank: Dict[int, int] = {}

    def add(self, rank: int, seq_id: int, prompt_token_ids) -> None:
        self.workers[rank].add(seq_id, prompt_token_ids)
        self._rank[seq_id] = rank

    def drop(self, seq_id: int) -> None:
        """Forget a finished or rejected request (one never added is ignored)."""
        rank = self._rank.pop(seq_id, None)
        if rank is not None:
            self.workers[rank].drop(seq_id)

    def tokens(self, rank: int, seq_id: int):
        return self.workers[rank].tokens[seq_id]

    def output_tokens(self) -> Dict[int, List[int]]:
        """Output token ids by request, of every rank (docs/tables.md, tokens)."""
        return {s: t for w in self.workers for s, t in w.output_tokens().items()}

    def execute(self, plan: PlanContract) -> ExecutorOutput:
        outs = [w.execute(b) for w, b in zip(self.workers, plan.batches)]
        return ExecutorOutput(accepted=[o.accepted for o in outs],
                              forward_ns=sum(o.forward_ns for o in outs),
                              sample_ns=sum(o.sample_ns for o in outs), modeled=False,
                              parts=[o.parts or dict.fromkeys(PARTS, 0) for o in outs])
