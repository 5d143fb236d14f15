"""FLOPs and bytes of one forward step: the FlopsEstimator.

Two FLOP counts (docs/metrics.md defines them):
- model FLOPs: the work the step needed. Prefill in MHA form, decode in absorbed form;
  each sequence's real, accepted positions only; kv_b up-projects the new tokens only;
  logits where the step samples.
- executed FLOPs: the work the step ran. Adds padding (padded_q), rejected MTP drafts,
  kv_b re-up-projection of a prefill's cached prefix, and the MTP draft module.
Bytes: what the executed step moves through device memory (weights touched plus KV
cache read and written); activations and the embedding lookup are not counted.
csrc/cost_model.hpp's CostModel is its fast twin, held to it by tests/test_cost_model.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from . import _core
from .attention_cost import LayerCost, mla_layer, v4_layer
from .model_config import ModelConfig
from .plan import KIND_CHUNK, KIND_DECODE, KIND_FINAL, PHASES


@dataclass(frozen=True)
class StepFlops:
    """Totals over the batch. Breakdown keys: attn_proj, kv_up, attn_core, indexer_proj,
    index_scores, compressor, dense_ffn, moe, router, lm_head, mtp (executed only)."""
    model_flops: float
    executed_flops: float
    bytes: float
    model_breakdown: Dict[str, float]
    executed_breakdown: Dict[str, float]
    bytes_breakdown: Dict[str, float]  # weights, kv_read, kv_write


class FlopsEstimator:
    """Per-step FLOPs and bytes of one model, vectorised over the sequences of a batch.

    Byte sizes per element: weight_bytes for every weight but routed experts
    (expert_weight_bytes, default weight_bytes; 0.5 for V4's FP4 experts), kv_bytes for
    the latent KV cache, index_kv_bytes for the indexer's key cache (FP8 in V3.2/V4).
    """

    def __init__(self, model_config: ModelConfig, weight_bytes: float = 1.0,
                 expert_weight_bytes: Optional[float] = None, kv_bytes: float = 2.0,
                 index_kv_bytes: float = 1.0) -> None:
        self.cfg = model_config
        self.weight_bytes = weight_bytes
        self.expert_weight_bytes = weight_bytes if expert_weight_bytes is None \
            else expert_weight_bytes
        self.kv_bytes = kv_bytes
        self.index_kv_bytes = index_kv_bytes
        self._cost_model: Optional[_core.CostModel] = None

    def calc_flops(self, seqlen_q, seqlen_k, phase=None, *, kind=None, num_logits=None,
                   padded_q=None, accepted=None, mtp_q=None) -> StepFlops:
        """One step over a batch; every argument but phase is one integer per sequence.

        seqlen_q: positions computed (decode: 1 + drafts); seqlen_k: keys visible to the
        last of them, cached prefix included (the plan's Batch fields).
        phase ("prompt" or "decode", the plan's phase: every row) or kind (the plan's per-row KIND_*
        codes): give exactly one.
        num_logits: positions whose logits the step needs. Default: decode rows every
        accepted position; prefill rows 1 (with kind: 1 for a final chunk, 0 otherwise).
        padded_q: positions executed including padding (CP alignment, graph batch
        padding); default seqlen_q. Padding runs as extra positions at the row's end.
        accepted: drafts accepted per decode row; None means none. Rejected drafts are
        executed, not model, FLOPs.
        mtp_q: positions the MTP draft module runs on (executed only); default 0.
        """
        q, k, prefill, final, logits_given, pad, acc, mtp = self._validate(
            seqlen_q, seqlen_k, phase, kind, num_logits, padded_q, accepted, mtp_q)
        rejected = np.where(prefill, 0, q - 1 - acc)
        q_m, k_m = q - rejected, k - rejected
        logits_m = np.where(prefill, final, q_m) if logits_given is None else logits_given
        if np.any(logits_m > q_m):
            i = int(np.argmax(logits_m > q_m))
            raise ValueError(f"sequence {i}: num_logits {logits_m[i]} exceeds its "
                             f"{q_m[i]} accepted positions")
        k_e = k + pad - q
        logits_e = logits_m + np.where(prefill, 0, pad - q_m)
        model, _, _ = self._forward(q_m, k_m, prefill, logits_m, reup=False)
        executed, weights, kv = self._forward(pad, k_e, prefill, logits_e, reup=True)
        if np.any(mtp > 0):
            # MTP positions follow the same cached prefix as the main model's
            mtp_flops, mtp_weights, mtp_kv = self._mtp(mtp, k - q + mtp, prefill, logits_e)
            executed["mtp"] = mtp_flops
            weights += mtp_weights
            kv = {name: kv[name] + mtp_kv[name] for name in kv}
        nbytes = {"weights": weights, **kv}
        return StepFlops(sum(model.values()), sum(executed.values()), sum(nbytes.values()),
                         model, executed, nbytes)

    def cost_model(self) -> _core.CostModel:
        """The C++ twin of calc_flops for the scheduler's batches (built once):
        cost_model().batch(batch, accepted, mtp) gives calc_flops(batch.seqlen_q,
        batch.seqlen_k, kind=batch.kind, padded_q=batch.padded_q, accepted=accepted,
        mtp_q=batch.seqlen_q if mtp else None)'s totals as a StepCost (model_flops,
        executed_flops, bytes), without breakdowns and without checking the batch."""
        if self._cost_model is None:
            self._cost_model = _core.CostModel(self.cfg, self.weight_bytes,
                                               self.expert_weight_bytes, self.kv_bytes,
                                               self.index_kv_bytes)
        return self._cost_model

    def _validate(self, seqlen_q, seqlen_k, phase, kind, num_logits, padded_q, accepted,
                  mtp_q):
        q = _ints("seqlen_q", seqlen_q)
        n = len(q)
        k = _ints("seqlen_k", seqlen_k, n)
        prefill, final = _row_kinds(phase, kind, n)
        pad = q if padded_q is None else _ints("padded_q", padded_q, n)
        acc = np.zeros(n, np.int64) if accepted is None else _ints("accepted", accepted, n)
        mtp = np.zeros(n, np.int64) if mtp_q is None else _ints("mtp_q", mtp_q, n)
        logits = None if num_logits is None else _ints("num_logits", num_logits, n)
        _check(k < q, "seqlen_k < seqlen_q", seqlen_k=k, seqlen_q=q)
        _check(pad < q, "padded_q < seqlen_q", padded_q=pad, seqlen_q=q)
        _check(q < 1, "a row computes no position", seqlen_q=q)
        _check(prefill & (acc > 0), "accepted drafts on a prefill row", accepted=acc)
        _check(~prefill & (acc > q - 1), "accepted > seqlen_q - 1", accepted=acc, seqlen_q=q)
        if np.any(mtp > 0) and self.cfg.num_nextn_predict_layers == 0:
            raise ValueError(f"model {self.cfg.name} has no MTP module; mtp_q must be 0")
        return q, k, prefill, final, logits, pad, acc, mtp

    def _forward(self, q, k, prefill, logits, reup):
        """Main-model FLOPs by component, weight bytes, KV bytes."""
        cfg = self.cfg
        tokens = float(q.sum())
        flops: Dict[str, float] = {}
        weights = 0.0
        kv = {"kv_read": 0.0, "kv_write": 0.0}
        for layer, count in self._attention_layers(q, k, prefill, reup):
            for name, value in layer.flops.items():
                flops[name] = flops.get(name, 0.0) + count * value
            weights += count * layer.params * self.weight_bytes
            for name, value in self._kv_bytes(layer).items():
                kv[name] += count * value
        dense = cfg.first_k_dense_replace
        moe = cfg.num_hidden_layers - dense
        routed = cfg.num_hidden_layers - max(dense, cfg.num_hash_layers)
        if dense:
            flops["dense_ffn"] = 2.0 * dense * self._dense_params * tokens
            weights += dense * self._dense_params * self.weight_bytes
        flops["moe"] = 2.0 * moe * self._moe_active_params * tokens
        flops["router"] = 2.0 * routed * self._router_params * tokens
        flops["lm_head"] = 2.0 * self._head_params * float(logits.sum())
        weights += moe * self._moe_weight_bytes(tokens) \
            + routed * self._router_params * self.weight_bytes
        if logits.any():
            weights += self._head_params * self.weight_bytes
        return flops, (weights if tokens else 0.0), kv  # an empty batch reads nothing

    def _mtp(self, q, k, prefill, logits_e):
        """The MTP module on q positions: eh_proj, one attention + MoE layer, shared head.
        Its head runs on every position of decode rows, on the last of prefill rows with
        logits."""
        cfg = self.cfg
        tokens = float(q.sum())
        logits = np.where(prefill, np.minimum(q, logits_e), q)
        if cfg.architecture == "deepseek_v4":
            layer = v4_layer(cfg, cfg.mtp_compress_ratios[0], q, k)
        else:
            layer = mla_layer(cfg, q, k, prefill, reup=True)
        eh_proj = 2 * cfg.hidden_size * cfg.hidden_size
        dense_params = eh_proj + layer.params + self._router_params
        flops = (sum(layer.flops.values()) + 2.0 * tokens * (eh_proj + self._router_params
                 + self._moe_active_params) + 2.0 * self._head_params * float(logits.sum()))
        weights = dense_params * self.weight_bytes + self._moe_weight_bytes(tokens)
        if logits.any():
            weights += self._head_params * self.weight_bytes
        return flops, weights, self._kv_bytes(layer)

    def _attention_layers(self, q, k, prefill, reup):
        """(cost of one layer, number of such layers) for the main model's layers."""
        cfg = self.cfg
        if cfg.architecture == "deepseek_v4":
            counts = Counter(cfg.layer_compress_ratios)
            return [(v4_layer(cfg, r, q, k), n) for r, n in sorted(counts.items())]
        return [(mla_layer(cfg, q, k, prefill, reup), cfg.num_hidden_layers)]

    def _kv_bytes(self, layer: LayerCost) -> Dict[str, float]:
        return {"kv_read": layer.kv_read * self.kv_bytes
                + layer.index_read * self.index_kv_bytes,
                "kv_write": layer.kv_write * self.kv_bytes
                + layer.index_write * self.index_kv_bytes}

    def _moe_weight_bytes(self, tokens: float) -> float:
        """Shared experts plus the routed experts that `tokens` touch in one MoE layer.

        Routing is modelled as uniform and independent across tokens, each token picking
        k of E experts: E * (1 - (1 - k/E)^tokens) distinct experts in expectation. Real
        routing is skewed, so this is an upper estimate of the distinct experts.
        """
        cfg = self.cfg
        E, top_k = cfg.n_routed_experts, cfg.num_experts_per_tok
        expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
        distinct = E * -np.expm1(tokens * np.log1p(-top_k / E)) if top_k < E else float(E)
        return float(distinct * expert * self.expert_weight_bytes
                     + cfg.n_shared_experts * expert * self.weight_bytes)

    @property
    def _dense_params(self) -> int:
        return 3 * self.cfg.hidden_size * self.cfg.dense_intermediate_size  # SwiGLU gate, up, down

    @property
    def _moe_active_params(self) -> int:
        cfg = self.cfg
        return 3 * cfg.hidden_size * cfg.moe_intermediate_size \
            * (cfg.num_experts_per_tok + cfg.n_shared_experts)

    @property
    def _router_params(self) -> int:
        return self.cfg.hidden_size * self.cfg.n_routed_experts

    @property
    def _head_params(self) -> int:
        return self.cfg.hidden_size * self.cfg.vocab_size


def _ints(name: str, values, n: Optional[int] = None) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one value per sequence (1-D), got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if n is not None and len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} values; seqlen_q has {n}")
    if np.any(arr < 0):
        raise ValueError(f"{name}[{int(np.argmax(arr < 0))}] is negative")
    return arr.astype(np.int64)


def _row_kinds(phase: Optional[str], kind, n: int):
    """(prefill rows, rows whose chunk finishes the prefill). phase="prompt" counts every
    row as a final chunk."""
    if (phase is None) == (kind is None):
        raise ValueError("give exactly one of phase (for every row) and kind (per row)")
    if kind is None:
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(reversed(PHASES))}, got {phase!r}")
        prefill = np.full(n, phase == "prompt")
        return prefill, prefill.astype(np.int64)
    kinds = _ints("kind", kind, n)
    bad = ~np.isin(kinds, (KIND_CHUNK, KIND_FINAL, KIND_DECODE))
    if bad.any():
        raise ValueError(f"kind[{int(np.argmax(bad))}] = {kinds[bad][0]} is not a KIND_* code")
    return kinds != KIND_DECODE, (kinds == KIND_FINAL).astype(np.int64)


def _check(bad: np.ndarray, what: str, **arrays: np.ndarray) -> None:
    if np.any(bad):
        i = int(np.argmax(bad))
        values = ", ".join(f"{name}={int(a[i])}" for name, a in arrays.items())
        raise ValueError(f"sequence {i}: {what} ({values})")
