"""Attention cost of one layer over a batch: FLOPs, weight parameters, cache traffic.

Formulas: docs/design/hardware_and_models.md §3.2-3.4 (MLA, DSA) and §3.7 (V4).
A GEMM (m x k)(k x n) costs 2mkn; norms, RoPE, softmax and compressor pooling are not counted.

Sequence i computes q_i queries at the last positions of its k_i visible keys: query j
(1..q_i) sees p = k_i - q_i + j keys. Every sum over "p" below runs over those positions.
Arguments are per-sequence int64 arrays; results are totals over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np

from .model_config import ModelConfig

CSA_RATIO = 4  # the only compress ratio with an indexer (and overlapping compression)


@dataclass
class LayerCost:
    flops: Dict[str, float] = field(default_factory=dict)
    params: float = 0.0  # attention weights the layer reads
    kv_read: float = 0.0  # cache elements (main KV) read / written
    kv_write: float = 0.0
    index_read: float = 0.0  # indexer key elements read / written
    index_write: float = 0.0


def causal_pairs(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(query, key) pairs attended under causal masking: sum of p = q*k - q(q-1)/2."""
    return q * k - q * (q - 1) // 2


def _prefix_clipped(n: np.ndarray, cap: int) -> np.ndarray:
    """Sum over p = 1..n of min(p, cap)."""
    m = np.minimum(n, cap)
    return m * (m + 1) // 2 + cap * (n - m)


def clipped_pairs(q: np.ndarray, k: np.ndarray, cap: int) -> np.ndarray:
    """Sum over the queries' p of min(p, cap): a sliding window, or DSA's top-k."""
    return _prefix_clipped(k, cap) - _prefix_clipped(k - q, cap)


def _prefix_blocks(n: np.ndarray, ratio: int, cap: Optional[int]) -> np.ndarray:
    """Sum over p = 1..n of min(p // ratio, cap): complete compressed blocks, capped."""
    if cap is not None:
        below = np.minimum(n, ratio * cap - 1)  # p // ratio < cap exactly when p < ratio*cap
        return _prefix_blocks(below, ratio, None) + cap * (n - below)
    m = n // ratio
    return ratio * m * (m - 1) // 2 + m * (n - m * ratio + 1)


def block_pairs(q: np.ndarray, k: np.ndarray, ratio: int, cap: Optional[int] = None) -> np.ndarray:
    """Sum over the queries' p of min(p // ratio, cap): compressed entries each query sees."""
    return _prefix_blocks(k, ratio, cap) - _prefix_blocks(k - q, ratio, cap)


def _total(x: np.ndarray) -> float:
    return float(np.sum(x, dtype=np.float64))


def mla_layer(cfg: ModelConfig, q: np.ndarray, k: np.ndarray, prefill: np.ndarray,
              reup: bool) -> LayerCost:
    """One MLA layer (deepseek_v3), with the DSA indexer when the model has one.

    Prefill rows run in MHA form: kv_b up-projects K_nope and V for the query tokens, or
    for every visible key when `reup` (an executed path that re-up-projects the cached
    prefix). Decode rows, and every row of a DSA model, run in absorbed (MQA) form over
    the latent cache: W_UK folds into q and W_UV into the output, per query token. Both
    forms cost 2 * kv_b parameters per token they touch.
    """
    H, N, R = cfg.hidden_size, cfg.num_attention_heads, cfg.qk_rope_head_dim
    Lq = cfg.q_lora_rank
    Lkv, P, V = cfg.mla
    index = cfg.indexer
    q_params = H * N * (P + R) if Lq is None else H * Lq + Lq * N * (P + R)
    proj = q_params + H * (Lkv + R) + N * V * H
    kv_b = Lkv * N * (P + V)
    k = np.where(q > 0, k, 0)  # a row with no query touches no key
    mha = prefill & (not cfg.has_indexer)
    pairs = causal_pairs(q, k)
    up_tokens = np.where(mha & reup, k, q)
    attended = clipped_pairs(q, k, index.index_topk) if index is not None else pairs
    per_pair = np.where(mha, 2 * N * (P + R) + 2 * N * V, 2 * N * (Lkv + R) + 2 * N * Lkv)
    cost = LayerCost(params=proj + kv_b)
    cost.flops["attn_proj"] = 2.0 * proj * _total(q)
    cost.flops["kv_up"] = 2.0 * kv_b * _total(up_tokens)
    cost.flops["attn_core"] = _total(per_pair * attended.astype(np.float64))
    cost.kv_write = cfg.kv_cache_dim * _total(q)
    if index is None:
        cost.kv_read = cfg.kv_cache_dim * _total(k)
        return cost
    nI, dI, topk, Lq = index
    indexer = Lq * nI * dI + H * dI + H * nI  # q from the q latent, k, head weights
    cost.params += indexer
    cost.flops["indexer_proj"] = 2.0 * indexer * _total(q)
    cost.flops["index_scores"] = 2.0 * nI * dI * _total(pairs)
    # each query reads its own top-k latents; the chunk reads at most their union
    cost.kv_read = cfg.kv_cache_dim * _total(np.minimum(k, q * topk))
    cost.index_read = dI * _total(k)
    cost.index_write = dI * _total(q)
    return cost


def v4_layer(cfg: ModelConfig, ratio: int, q: np.ndarray, k: np.ndarray) -> LayerCost:
    """One deepseek_v4 attention layer: sliding window plus, for ratio 4 (CSA), the
    indexer's top-k compressed entries, or for ratio 128 (HCA), every compressed entry.
    One latent KV head of head_dim serves as K and V: 4 * N * head_dim per attended key.
    """
    H, N = cfg.hidden_size, cfg.num_attention_heads
    d, o_rank, o_groups, W, Lq = cfg.v4
    proj = (H * Lq + Lq * N * d + H * d  # wq_a, wq_b, wkv
            + N * d * o_rank + o_groups * o_rank * H)  # wo_a, wo_b
    k = np.where(q > 0, k, 0)  # a row with no query touches no key
    tokens = _total(q)
    attended = clipped_pairs(q, k, W).astype(np.float64)
    cost = LayerCost(params=proj)
    cost.flops["attn_proj"] = 2.0 * proj * tokens
    cost.kv_read = d * _total(np.minimum(k, q + W - 1))  # the window the chunk sees
    cost.kv_write = d * _total(np.minimum(q, W))
    if ratio:
        coff = 2 if ratio == CSA_RATIO else 1  # CSA compresses overlapping windows
        compressor = 2 * H * coff * d  # wkv, wgate
        produced = _total(k // ratio - (k - q) // ratio)
        cost.params += compressor
        cost.flops["compressor"] = 2.0 * compressor * tokens
        cost.kv_write += d * produced
    if ratio == CSA_RATIO:
        index = cfg.indexer
        assert index is not None, "CSA layers have an indexer (ModelConfig._check_v4)"
        nI, dI, topk, _ = index
        indexer = Lq * nI * dI + H * nI + 2 * H * coff * dI  # wq_b, weights_proj, compressor
        cost.params += indexer
        cost.flops["indexer_proj"] = 2.0 * indexer * tokens
        cost.flops["index_scores"] = 2.0 * nI * dI * _total(block_pairs(q, k, ratio))
        attended = attended + block_pairs(q, k, ratio, topk)
        cost.kv_read += d * _total(np.minimum(k // ratio, q * topk))
        cost.index_read = dI * _total(k // ratio)
        cost.index_write = dI * produced
    elif ratio:
        attended = attended + block_pairs(q, k, ratio)
        cost.kv_read += d * _total(k // ratio)
    cost.flops["attn_core"] = 4.0 * N * d * _total(attended)
    return cost
