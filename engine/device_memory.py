"""What one device of a deployment holds: its shard of the weights, a reserve, and the KV
cache of its DP rank's sequences (MLA's single latent head is replicated over attention
TP, so every device of a rank holds the rank's whole cache).

    KV budget = hbm * memory_utilization - weights - sliding windows (V4)
    num_kv_blocks (auto) = KV budget / (block_size * KV bytes per token)

as vLLM's gpu_memory_utilization derives its pool. docs/modeling.md states the sharding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .attention_cost import mla_layer, v4_layer
from .deployment import BYTES, Deployment
from .devices.profile import DeviceProfile
from .model_config import ModelConfig

INDEX_KEY_BYTES = 1.0  # the indexer's key cache is FP8 (V3.2, V4)
INT32_MAX = 2**31 - 1


class DoesNotFit(ValueError):
    """A model or deployment that does not fit its devices; the message has the numbers."""


@dataclass(frozen=True)
class DeviceMemory:
    hbm: float  # bytes the deployment may use per device (hbm_gb * memory_utilization)
    weights: float  # bytes of weights per device
    windows: float  # bytes of V4 sliding windows for max_num_seqs sequences
    kv_per_token: float  # bytes per cached token per device

    @property
    def kv_budget(self) -> float:
        return self.hbm - self.weights - self.windows

    def blocks(self, block_size: int) -> int:
        return int(self.kv_budget // (block_size * self.kv_per_token))


@lru_cache(maxsize=None)  # a search sizes hundreds of deployments of a few models
def attention_params(cfg: ModelConfig, ratio: int) -> float:
    """One attention layer's weights (projections, indexer, compressor)."""
    none = np.zeros(0, np.int64)
    if cfg.architecture == "deepseek_v4":
        return float(v4_layer(cfg, ratio, none, none).params)
    return float(mla_layer(cfg, none, none, none.astype(bool), reup=False).params)


def weight_bytes(cfg: ModelConfig, d: Deployment) -> float:
    """One device's shard of every weight, the MTP module's included."""
    H, E = cfg.hidden_size, cfg.n_routed_experts
    mtp = cfg.num_nextn_predict_layers
    if cfg.architecture == "deepseek_v4":
        ratios = cfg.layer_compress_ratios + cfg.mtp_compress_ratios
    else:
        ratios = (0,) * (cfg.num_hidden_layers + mtp)
    attention = sum(attention_params(cfg, r) for r in ratios) + mtp * 2 * H * H  # eh_proj
    routed_layers = cfg.num_hidden_layers - max(cfg.first_k_dense_replace, cfg.num_hash_layers) \
        + mtp
    dense = (cfg.first_k_dense_replace * 3 * H * (cfg.intermediate_size or 0)
             + _moe_layers(cfg) * cfg.n_shared_experts * _expert_params(cfg)
             + 2 * H * cfg.vocab_size)  # embedding and LM head
    return (attention / d.attention_tp + dense / d.dense_tp + routed_layers * H * E) \
        * BYTES[d.precision["dense"]] + routed_expert_bytes(cfg, d)


def routed_expert_bytes(cfg: ModelConfig, d: Deployment, ep: int = 0) -> float:
    """One device's routed experts, redundant ones included (at expert parallelism `ep`,
    default the deployment's)."""
    experts = (cfg.n_routed_experts + d.redundant_experts) / (ep or d.moe_ep) / d.moe_tp
    return _moe_layers(cfg) * experts * _expert_params(cfg) * BYTES[d.precision["experts"]]


def _moe_layers(cfg: ModelConfig) -> int:
    return cfg.num_hidden_layers - cfg.first_k_dense_replace + cfg.num_nextn_predict_layers


def _expert_params(cfg: ModelConfig) -> int:
    return 3 * cfg.hidden_size * cfg.moe_intermediate_size  # SwiGLU gate, up, down


def kv_bytes_per_token(cfg: ModelConfig, d: Deployment) -> float:
    """Cache bytes one token adds on each layer that keeps it, the MTP layer's included."""
    kv = BYTES[d.precision["kv"]]
    indexer = cfg.indexer  # V3.2: every layer's; V4: the CSA layers' (compress ratio 4)
    index = indexer.index_head_dim * INDEX_KEY_BYTES if indexer is not None else 0.0
    if cfg.architecture == "deepseek_v3":
        layers = cfg.num_hidden_layers + cfg.num_nextn_predict_layers
        return layers * (cfg.kv_cache_dim * kv + index)
    head_dim = cfg.v4.head_dim
    total = 0.0
    for ratio in cfg.layer_compress_ratios + cfg.mtp_compress_ratios:
        if ratio:  # a window-only layer keeps no token past its window
            total += (head_dim * kv + (index if ratio == 4 else 0.0)) / ratio
    return total


def window_bytes(cfg: ModelConfig, d: Deployment, max_num_seqs: int) -> float:
    """V4: every layer keeps each running sequence's last sliding_window tokens."""
    if cfg.architecture != "deepseek_v4":
        return 0.0
    layers = cfg.num_hidden_layers + cfg.num_nextn_predict_layers
    v4 = cfg.v4
    return max_num_seqs * layers * v4.sliding_window * v4.head_dim * BYTES[d.precision["kv"]]


def device_memory(cfg: ModelConfig, d: Deployment, profile: DeviceProfile,
                  max_num_seqs: int) -> DeviceMemory:
    return DeviceMemory(hbm=profile.figure("hbm_gb") * 1e9 * d.memory_utilization,
                        weights=weight_bytes(cfg, d),
                        windows=window_bytes(cfg, d, max_num_seqs),
                        kv_per_token=kv_bytes_per_token(cfg, d))


def kv_blocks(cfg: ModelConfig, d: Deployment, profile: DeviceProfile, block_size: int,
              max_num_seqs: int, requested=None) -> int:
    """num_kv_blocks per DP rank: `requested` checked against memory, or (None) the most
    memory allows, capped at max_num_seqs sequences of max_position_embeddings tokens (a
    pool never uses more). Raises DoesNotFit with the numbers when it does not fit."""
    if profile.hbm_gb is None:
        raise DoesNotFit(f"{profile.name} has no published HBM capacity")
    m = device_memory(cfg, d, profile, max_num_seqs)
    where = f"{cfg.name} {d.precision['experts']} on {d.devices} x {profile.name}"
    hbm = f"{_gb(m.hbm)} GB per device (memory_utilization {d.memory_utilization:g} of its " \
          f"{_gb(profile.hbm_gb.value * 1e9)} GB of HBM)"
    if m.weights >= m.hbm:
        raise DoesNotFit(f"{where}: weights about {_gb(m.weights)} GB per device > {hbm}; "
                           f"{_hint(cfg, d, m)}")
    fit = m.blocks(block_size)
    if fit < 1:
        raise DoesNotFit(f"{where}: weights {_gb(m.weights)} GB and sliding windows "
                           f"{_gb(m.windows)} GB per device leave no KV block in {hbm}")
    if requested is not None:
        if requested > fit:
            raise DoesNotFit(f"{where}: {requested} KV blocks of {block_size} tokens need "
                               f"{_gb(requested * block_size * m.kv_per_token)} GB per device; "
                               f"after {_gb(m.weights)} GB of weights, {hbm} leaves room for "
                               f"{fit}")
        return requested
    return min(fit, pool_cap(cfg, block_size, max_num_seqs))


def pool_cap(cfg: ModelConfig, block_size: int, max_num_seqs: int) -> int:
    """The most KV blocks a DP rank's pool can ever use: max_num_seqs sequences of
    max_position_embeddings tokens (and what the core's int32 holds)."""
    return min(max_num_seqs * math.ceil(cfg.max_position_embeddings / block_size), INT32_MAX)


def _hint(cfg: ModelConfig, d: Deployment, m: DeviceMemory) -> str:
    """The smallest power-of-two expert parallelism at which the weights would fit."""
    rest = m.weights - routed_expert_bytes(cfg, d)
    ep = d.moe_ep * 2
    while ep <= cfg.n_routed_experts:
        if rest + routed_expert_bytes(cfg, d, ep) < m.hbm:
            return f"shard the experts, e.g. moe.ep >= {ep} (devices >= {ep * d.moe_tp})"
        ep *= 2
    return "shard attention and the dense layers too (attention.tp, dense.tp), or use " \
           "devices with more memory"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.0f}"
