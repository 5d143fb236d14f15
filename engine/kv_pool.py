"""`num_kv_blocks: auto` on a real accelerator (CUDA, or an Ascend NPU through torch_npu):
the pool is what the device's memory leaves once the model is resident. It is sized as
vLLM's gpu_memory_utilization sizes its pool (its Worker's determine_num_available_blocks):

    KV bytes      = total * memory_utilization - in use after the weights - reserve
    num_kv_blocks = KV bytes / DP ranks on the device / bytes per block

"In use" is total - free as the runtime reports it (its context, the weights, and any
other process on the device). The reserve is measured: the allocator's peak above what was
allocated during one forward, sampling included, of a max_num_batched_tokens prompt chunk
(the largest a prompt round forms). A bytes per block is the model's paged cache as built:
its cache layers x block_size x the latent dim at its dtype. The pool is capped where the
modeled one is (device_memory.pool_cap). An explicit num_kv_blocks is checked against the
same figure instead, before any cache is allocated. A CPU has no HBM to size for: it keeps
the configured pool.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Optional

import numpy as np
import torch

from .device_memory import DoesNotFit, pool_cap
from .model import DeepSeekModel
from .plan import KIND_FINAL
from .worker import Worker

CPU_NOTE = "a CPU has no HBM to size for: the configured pool"


@dataclass(frozen=True)
class KVPool:
    """How a rank's pool was sized, as the run's manifest records it."""

    num_kv_blocks: int
    sized: str  # "device memory", or "configured" (given: checked on a device; or a CPU's default)
    note: str = ""
    total_bytes: Optional[int] = None  # the device's memory
    memory_utilization: Optional[float] = None
    used_bytes: Optional[int] = None  # in use once the weights were resident
    reserve_bytes: Optional[int] = None  # the profiling forward's peak above that
    bytes_per_block: Optional[int] = None
    ranks: Optional[int] = None  # DP ranks sharing the device, each with its own pool
    fit_blocks: Optional[int] = None  # what memory leaves per rank, before the cap

    def manifest(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


def blocks_from_memory(total: float, used: float, reserve: float, utilization: float,
                       bytes_per_block: float, ranks: int = 1) -> int:
    """KV blocks per rank in what the device leaves: (total x utilization - used -
    reserve) / ranks / bytes_per_block, rounded down; 0 when nothing is left."""
    left = total * utilization - used - reserve
    return max(int(left / ranks // bytes_per_block), 0)


def memory_queries(device: torch.device):
    """The runtime's memory queries for the device (torch.cuda, or torch.npu once torch_npu
    is loaded); None for a CPU."""
    return getattr(torch, device.type) if device.type in ("cuda", "npu") else None


def size_kv_pool(model: DeepSeekModel, device: torch.device, config) -> KVPool:
    """Each DP rank's pool for an EngineConfig whose model is resident on `device`: sized
    from memory (config.size_kv_blocks), or the configured one checked against it. With
    config.memory_utilization None, or on a CPU, the configured pool. Raises DoesNotFit,
    with the numbers, when not one sequence of max_position_embeddings tokens fits a rank,
    or the configured pool does not."""
    sched = config.scheduler
    memory = memory_queries(device)
    if config.memory_utilization is None or memory is None:
        cpu = config.memory_utilization is not None and config.size_kv_blocks
        return KVPool(sched.num_kv_blocks, "configured", CPU_NOTE if cpu else "")
    memory.synchronize(device)
    memory.empty_cache()
    free, total = memory.mem_get_info(device)
    used = total - free
    tokens = min(sched.max_num_batched_tokens, model.cfg.max_position_embeddings)
    reserve = _profile_reserve(model, device, config, memory, tokens)
    per_block = model.kv_block_bytes(sched.block_size)
    u, ranks = config.memory_utilization, sched.dp_size
    fit = blocks_from_memory(total, used, reserve, u, per_block, ranks)
    figures = dict(total_bytes=int(total), memory_utilization=u, used_bytes=int(used),
                   reserve_bytes=int(reserve), bytes_per_block=per_block, ranks=ranks,
                   fit_blocks=fit)
    left = (f"{model.cfg.name} ({config.dtype}) on {device}: {_gb(total)} GB x "
            f"memory_utilization {u:g} = {_gb(total * u)} GB; {_gb(used)} GB in use with the "
            f"weights resident and {_gb(reserve)} GB of activations (a {tokens}-token "
            f"forward) leave {_gb(max(total * u - used - reserve, 0))} GB: {fit} KV blocks "
            f"of {sched.block_size} tokens ({per_block:,} bytes each) per DP rank ({ranks} on "
            f"the device)")
    if not config.size_kv_blocks:
        if sched.num_kv_blocks > fit:
            raise DoesNotFit(f"{left}, < the {sched.num_kv_blocks} configured")
        return KVPool(sched.num_kv_blocks, "configured", **figures)
    one_sequence = math.ceil(model.cfg.max_position_embeddings / sched.block_size)
    if fit < one_sequence:
        raise DoesNotFit(f"{left}, < {one_sequence} for one sequence of "
                         f"max_position_embeddings {model.cfg.max_position_embeddings} tokens")
    return KVPool(min(fit, pool_cap(model.cfg, sched.block_size, sched.max_num_seqs)),
                  "device memory", **figures)


def _profile_reserve(model, device, config, memory, tokens: int) -> int:
    """The allocator's peak above its baseline over one forward of a `tokens` prompt chunk,
    through a Worker with just the blocks that chunk needs (allocated before the baseline:
    KV, not activations)."""
    sched = config.scheduler
    blocks = math.ceil(tokens / sched.block_size)
    worker = Worker(model, blocks, sched.block_size, sched.num_mtp, config.mtp_acceptance,
                    seed=config.seed, device=device)
    worker.add(0, [0] * tokens)
    chunk = SimpleNamespace(seq_ids=np.zeros(1, np.int64), seqlen_q=np.array([tokens]),
                            seqlen_k=np.array([tokens]), kind=np.array([KIND_FINAL]),
                            block_tables=np.arange(blocks, dtype=np.int64)[None])
    memory.synchronize(device)
    baseline = memory.memory_allocated(device)
    memory.reset_peak_memory_stats(device)
    worker.execute(chunk)
    memory.synchronize(device)
    reserve = memory.max_memory_allocated(device) - baseline
    del worker
    memory.empty_cache()
    return max(int(reserve), 0)


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.2f}"
