"""A prefilled sequence's KV moved between engine processes (P/D on the real engine): the
latent cache of every cache layer (the MTP module's included) at its prompt positions,
gathered from the prefill rank's paged cache into one contiguous tensor, sent point to
point, and scattered into the blocks the decode rank's scheduler reserved for it
(harness/ranks/pd_rank_process.py moves it).

The prefill side copies the KV out in the step that hands the sequence off, before any
later forward can write into its freed blocks; the copy waits for the decode router's
choice and the decode side's reservation (SGLang and Mooncake keep the blocks themselves
pinned instead, and send from them).
"""

from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np
import torch


class HandedOff(NamedTuple):
    """What the decode side needs of a sequence the prefill handed off."""

    first_token: int
    # [cache layers, prompt tokens, kv_cache_dim]; None: not moved (one output token)
    kv: Optional[torch.Tensor]


def _block_slots(blocks, num_tokens: int, block_size: int) -> torch.Tensor:
    """The flat cache slots (block * block_size + offset) of positions 0..num_tokens-1."""
    blocks = np.asarray(blocks, dtype=np.int64)[:-(-num_tokens // block_size)]
    if len(blocks) and blocks.min() < 0:
        raise ValueError(f"{num_tokens} positions need {len(blocks)} blocks; the table "
                         f"has fewer")
    slots = (blocks[:, None] * block_size + np.arange(block_size)).reshape(-1)[:num_tokens]
    return torch.from_numpy(slots)


def gather(kv_cache: torch.Tensor, blocks, num_tokens: int) -> torch.Tensor:
    """The KV of positions 0..num_tokens-1 of a sequence whose block table is `blocks`:
    [layers, num_tokens, dim], contiguous (a copy)."""
    layers, _, block_size, dim = kv_cache.shape
    slots = _block_slots(blocks, num_tokens, block_size).to(kv_cache.device)
    kv = kv_cache.view(layers, -1, dim).index_select(1, slots).contiguous()
    _settle(kv.device)
    return kv


def scatter(kv_cache: torch.Tensor, blocks, kv: torch.Tensor) -> None:
    """Write `kv` (gather()'s) into positions 0.. of the sequence whose blocks are `blocks`."""
    layers, _, block_size, dim = kv_cache.shape
    if kv.shape[0] != layers or kv.shape[2] != dim:
        raise ValueError(f"KV of shape {tuple(kv.shape)} does not fit a cache of {layers} "
                         f"layers of width {dim}")
    slots = _block_slots(blocks, kv.shape[1], block_size).to(kv_cache.device)
    kv_cache.view(layers, -1, dim).index_copy_(1, slots, kv.to(kv_cache.dtype))
    _settle(kv_cache.device)


def _settle(device: torch.device) -> None:
    """On a device, the copy done before anything else runs: the send (on the process
    group's stream) and the next forward (on the Worker's) do not wait for this stream."""
    if device.type != "cpu":
        getattr(torch, device.type).synchronize(device)


def kv_shape(kv_cache: torch.Tensor, num_tokens: int) -> Tuple[int, int, int]:
    """The shape gather() gives for num_tokens positions."""
    return kv_cache.shape[0], num_tokens, kv_cache.shape[3]


def receive_buffer(engine, num_tokens: int) -> torch.Tensor:
    """An empty tensor for the KV of num_tokens positions, as the engine's cache holds it."""
    cache = engine.executor.workers[0].kv_cache
    return torch.empty(kv_shape(cache, num_tokens), dtype=cache.dtype, device=cache.device)


def handed_off(engine, record, moves: Callable[[int], bool]) -> Dict[int, HandedOff]:
    """Of a prompt engine's step (no overlap: its record is this step's), every sequence
    it handed off with its first token, and its prompt's KV where `moves(seq_id)`. The
    Worker keeps finished outputs (keep_tokens), so the first token is there after the
    step dropped it."""
    worker = engine.executor.workers[0]
    batch = record.plan.batches[0]
    rows = {int(s): b for b, s in enumerate(batch.seq_ids.tolist())}
    out = {}
    for seq_id in record.post.finished.tolist():
        b = rows[seq_id]
        kv = gather(worker.kv_cache, batch.block_tables[b], int(batch.seqlen_k[b])) \
            if moves(seq_id) else None
        out[seq_id] = HandedOff(worker.outputs[seq_id][0], kv)
    return out


def receive(engine, seq_id: int, kv: torch.Tensor) -> None:
    """A decode (completion) engine's sequence, admitted with its KV in transfer, takes
    the KV into its reserved blocks and decodes from the next step."""
    scatter(engine.executor.workers[0].kv_cache, engine.scheduler.seq(seq_id).blocks, kv)
    engine.kv_arrived(seq_id)
