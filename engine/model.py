"""A DeepSeek-V3-style decoder in torch: MLA attention over a paged latent KV cache, MoE
FFN (routed top-k plus shared experts; the first layers dense), an MTP module, RMSNorm,
RoPE. Weights are random from a seed: the harness measures compute, not answers. With an
EP group (engine/ep.py) each rank keeps only its routed experts, every rank having built
the same seeded weights.

The KV cache holds, per layer and token, the normalised latent c_kv (kv_lora_rank) and the
rotated shared key k_rope (qk_rope_head_dim): [layers, num_blocks, block_size, dim].
Prefill rows attend in MHA form (the latent up-projected to per-head K and V); decode rows
in absorbed form (W_UK folded into q, W_UV into the output), over the same cache. With
two micro-batches (split_rows) their layers run interleaved (MoE.staged, drive), each up to
its next all-to-all in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generator, List, Optional, Tuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from .model_config import ModelConfig
from .step_parts import PartTimer

if TYPE_CHECKING:
    from .ep import EPGroup


@dataclass
class ForwardBatch:
    """Packed tokens of one step: rows are sequences, tokens concatenated row by row."""

    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64, absolute position of each token
    slot_mapping: torch.Tensor  # [T] int64, cache slot (block * block_size + offset), -1: none
    query_start: list  # [B + 1] row offsets into the packed tokens
    seqlen_k: list  # [B] keys visible to each row's last token
    block_tables: torch.Tensor  # [B, max_blocks] int64, -1 padded
    decode: list  # [B] bool: absorbed (decode) or MHA (prefill) attention


def split_rows(batch: ForwardBatch) -> Tuple[ForwardBatch, ForwardBatch]:
    """Two micro-batches of whole rows, cut where the tokens halve best (either may be
    empty: it still joins every collective)."""
    qs, rows = batch.query_start, len(batch.seqlen_k)
    cut = min(range(rows + 1), key=lambda r: abs(2 * qs[r] - qs[-1]))

    def part(r0: int, r1: int) -> ForwardBatch:
        t0, t1 = qs[r0], qs[r1]
        return ForwardBatch(input_ids=batch.input_ids[t0:t1], positions=batch.positions[t0:t1],
                            slot_mapping=batch.slot_mapping[t0:t1],
                            query_start=[q - t0 for q in qs[r0:r1 + 1]],
                            seqlen_k=batch.seqlen_k[r0:r1],
                            block_tables=batch.block_tables[r0:r1], decode=batch.decode[r0:r1])
    return part(0, cut), part(cut, rows)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) by position * theta^(-2i/d); x is [T, ..., d]."""
    d = x.shape[-1]
    freqs = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]  # [T, d/2]
    shape = (angles.shape[0],) + (1,) * (x.dim() - 2) + (d // 2,)
    cos, sin = angles.cos().view(shape).to(x.dtype), angles.sin().view(shape).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class MLAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.cfg, self.layer = cfg, layer
        n, h, mla = cfg.num_attention_heads, cfg.hidden_size, cfg.mla
        if cfg.q_lora_rank:
            self.wq_a = nn.Linear(h, cfg.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
            self.wq_b = nn.Linear(cfg.q_lora_rank, n * cfg.qk_head_dim, bias=False)
        else:
            self.wq = nn.Linear(h, n * cfg.qk_head_dim, bias=False)
        self.wkv_a = nn.Linear(h, mla.kv_lora_rank + cfg.qk_rope_head_dim, bias=False)
        self.kv_norm = RMSNorm(mla.kv_lora_rank, cfg.rms_norm_eps)
        self.wkv_b = nn.Linear(mla.kv_lora_rank, n * (mla.qk_nope_head_dim + mla.v_head_dim),
                               bias=False)
        self.wo = nn.Linear(n * mla.v_head_dim, h, bias=False)
        self.scale = 1.0 / math.sqrt(cfg.qk_head_dim)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        cfg, mla = self.cfg, self.cfg.mla
        n, nope = cfg.num_attention_heads, mla.qk_nope_head_dim
        q = self.wq_b(self.q_norm(self.wq_a(x))) if cfg.q_lora_rank else self.wq(x)
        q = q.view(-1, n, cfg.qk_head_dim)
        q_nope, q_rope = q[..., :nope], rope(q[..., nope:], batch.positions, cfg.rope_theta)
        kv = self.wkv_a(x)
        latent = torch.cat((self.kv_norm(kv[:, :mla.kv_lora_rank]),
                            rope(kv[:, mla.kv_lora_rank:], batch.positions, cfg.rope_theta)), -1)
        cache = kv_cache[self.layer].view(-1, cfg.kv_cache_dim)  # [slots, dim]
        written = batch.slot_mapping >= 0
        cache[batch.slot_mapping[written]] = latent[written].to(cache.dtype)

        out = torch.empty(x.shape[0], n, mla.v_head_dim, dtype=x.dtype, device=x.device)
        for row, (start, end) in enumerate(zip(batch.query_start[:-1], batch.query_start[1:])):
            k = batch.seqlen_k[row]
            ctx = gather_latent(cache, batch.block_tables[row], k, kv_cache.shape[2]).to(x.dtype)
            attend = self._absorbed if batch.decode[row] else self._mha
            out[start:end] = attend(q_nope[start:end], q_rope[start:end], ctx, k)
        return self.wo(out.flatten(1))

    def _weights_uk_uv(self):
        cfg, mla = self.cfg, self.cfg.mla
        w = self.wkv_b.weight.view(cfg.num_attention_heads, mla.qk_nope_head_dim + mla.v_head_dim,
                                   mla.kv_lora_rank)
        return w[:, :mla.qk_nope_head_dim], w[:, mla.qk_nope_head_dim:]  # [N, P, L], [N, V, L]

    def _mha(self, q_nope, q_rope, ctx, k):
        """Up-project the latent of every visible key, then per-head attention."""
        cfg, mla = self.cfg, self.cfg.mla
        c_kv, k_rope = ctx[:, :mla.kv_lora_rank], ctx[:, mla.kv_lora_rank:]
        kv = self.wkv_b(c_kv).view(k, cfg.num_attention_heads, -1)
        k_nope, v = kv[..., :mla.qk_nope_head_dim], kv[..., mla.qk_nope_head_dim:]
        scores = (torch.einsum("qnd,knd->nqk", q_nope, k_nope)
                  + torch.einsum("qnd,kd->nqk", q_rope, k_rope)) * self.scale
        probs = causal_softmax(scores, k)
        return torch.einsum("nqk,knd->qnd", probs, v)

    def _absorbed(self, q_nope, q_rope, ctx, k):
        """Attend over the latent directly: q_nope @ W_UK as the query, W_UV after."""
        mla = self.cfg.mla
        w_uk, w_uv = self._weights_uk_uv()
        c_kv, k_rope = ctx[:, :mla.kv_lora_rank], ctx[:, mla.kv_lora_rank:]
        q_latent = torch.einsum("qnp,npl->qnl", q_nope, w_uk)
        scores = (torch.einsum("qnl,kl->nqk", q_latent, c_kv)
                  + torch.einsum("qnd,kd->nqk", q_rope, k_rope)) * self.scale
        probs = causal_softmax(scores, k)
        return torch.einsum("qnl,nvl->qnv", torch.einsum("nqk,kl->qnl", probs, c_kv), w_uv)


def gather_latent(cache: torch.Tensor, block_table: torch.Tensor, k: int,
                  block_size: int) -> torch.Tensor:
    """The latent of positions 0..k-1 of one sequence, through its block table."""
    pos = torch.arange(k, device=cache.device)
    return cache[block_table[pos // block_size] * block_size + pos % block_size]


def causal_softmax(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Softmax over keys; query i of q (the last q of k positions) sees keys <= k - q + i."""
    q = scores.shape[-2]
    visible = torch.arange(k, device=scores.device)[None, :] <= (k - q + torch.arange(
        q, device=scores.device))[:, None]
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, inner, bias=False)
        self.up = nn.Linear(hidden, inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    """Sigmoid-scored top-k routed experts plus always-on shared experts; with an EP group
    (engine/ep.py) only this rank's experts, the tokens exchanged by all-to-all."""

    def __init__(self, cfg: ModelConfig, timer: PartTimer) -> None:
        super().__init__()
        self.cfg, self.timer = cfg, timer
        self.router = nn.Linear(cfg.hidden_size, cfg.n_routed_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(cfg.hidden_size, cfg.moe_intermediate_size)
                                     for _ in range(cfg.n_routed_experts))
        self.shared = SwiGLU(cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts) \
            if cfg.n_shared_experts else None
        self.ep: Optional[EPGroup] = None

    def shard(self, ep: EPGroup) -> None:
        """Keep only this rank's experts (one module per slot, in slot order)."""
        self.ep = ep
        self.experts = nn.ModuleList(self.experts[e] for e in ep.placement.local_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drive([self.staged(x)])[0]

    def _route(self, x: torch.Tensor):
        scores = torch.sigmoid(self.router(x))
        weights, experts = scores.topk(self.cfg.num_experts_per_tok, dim=-1)
        return weights / weights.sum(-1, keepdim=True) * self.cfg.routed_scaling_factor, experts

    def _shared(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(x) if self.shared is not None else torch.zeros_like(x)

    def staged(self, x: torch.Tensor) -> Generator[None, None, torch.Tensor]:
        """The layer's output; yields while its dispatch or its combine is in flight."""
        with self.timer.part("dense"):
            weights, experts = self._route(x)
        if self.ep is None:
            with self.timer.part("dense"):
                out = self._shared(x)
            with self.timer.part("experts"):
                for e in experts.unique().tolist():
                    token, slot = (experts == e).nonzero(as_tuple=True)
                    out.index_add_(0, token, self.experts[e](x[token]) * weights[token, slot, None])
            return out
        plan = self.ep.plan(experts, weights)
        pending, received = self.ep.dispatch(x, plan)
        with self.timer.part("dense"):  # under the dispatch
            out = self._shared(x)
        yield
        pending.wait()
        got = received()
        with self.timer.part("experts"):
            y = self._local(got)
        pending, returned = self.ep.combine(y, got, plan)
        yield
        pending.wait()
        return out.index_add_(0, plan.tokens, returned())

    def _local(self, got) -> torch.Tensor:
        """Each received row's weighted sum over this rank's experts among its top-k."""
        y = torch.zeros_like(got.rows)
        for j, expert in enumerate(self.experts):
            row, col = (got.slots == j).nonzero(as_tuple=True)
            if len(row):
                y.index_add_(0, row, expert(got.rows[row]) * got.weights[row, col, None])
        return y


def drive(stages: List[Generator[None, None, torch.Tensor]]) -> List[torch.Tensor]:
    """Run micro-batches' stages in turn, each up to its next collective in flight (where
    it yields), until every one has returned: with two, one's all-to-all is in flight while
    the other computes. The order of the collectives is the same on every rank."""
    results: List[Optional[torch.Tensor]] = [None] * len(stages)
    live = list(range(len(stages)))
    while live:
        for i in list(live):
            try:
                next(stages[i])
            except StopIteration as done:
                results[i] = done.value
                live.remove(i)
    return [r for r in results if r is not None]


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, cache_layer: int, timer: PartTimer) -> None:
        super().__init__()
        self.timer = timer
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = MLAttention(cfg, cache_layer)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.ffn = SwiGLU(cfg.hidden_size, cfg.dense_intermediate_size) \
            if layer < cfg.first_k_dense_replace else MoE(cfg, timer)

    def forward(self, x, batch, kv_cache):
        return drive([self.staged(x, batch, kv_cache)])[0]

    def staged(self, x, batch, kv_cache) -> Generator[None, None, torch.Tensor]:
        with self.timer.part("attention"):
            x = x + self.attn(self.attn_norm(x), batch, kv_cache)
        h = self.ffn_norm(x)
        if isinstance(self.ffn, MoE):
            return x + (yield from self.ffn.staged(h))
        with self.timer.part("dense"):
            return x + self.ffn(h)


class MTPModule(nn.Module):
    """Predicts the token after next from (hidden at t, embedding of token t + 1)."""

    def __init__(self, cfg: ModelConfig, cache_layer: int, timer: PartTimer) -> None:
        super().__init__()
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.block = DecoderLayer(cfg, cfg.num_hidden_layers, cache_layer, timer)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, hidden, next_embeds, batch, kv_cache):
        x = self.eh_proj(torch.cat((self.enorm(next_embeds), self.hnorm(hidden)), -1))
        return self.norm(self.block(x, batch, kv_cache))


class DeepSeekModel(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0) -> None:
        if cfg.architecture != "deepseek_v3":
            raise ValueError(f"model {cfg.name}: the torch forward implements deepseek_v3 "
                             f"blocks, not {cfg.architecture} (use the modeled executor)")
        super().__init__()
        self.cfg = cfg
        self.timer = PartTimer()  # every layer's parts, per step (engine/step_parts.py)
        self.ep: Optional[EPGroup] = None
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, i, self.timer)
                                    for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = nn.ModuleList(MTPModule(cfg, cfg.num_hidden_layers + i, self.timer)
                                 for i in range(cfg.num_nextn_predict_layers))
        generator = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if not name.endswith("norm.weight"):
                p.data.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=generator)

    @property
    def num_cache_layers(self) -> int:
        return self.cfg.num_hidden_layers + self.cfg.num_nextn_predict_layers

    def new_kv_cache(self, num_blocks: int, block_size: int, dtype=None, device=None):
        return torch.zeros(self.num_cache_layers, num_blocks, block_size, self.cfg.kv_cache_dim,
                           dtype=dtype or self.lm_head.weight.dtype,
                           device=device or self.lm_head.weight.device)

    def kv_block_bytes(self, block_size: int) -> int:
        """Bytes of one block of new_kv_cache's default cache: every cache layer's latent."""
        return self.num_cache_layers * block_size * self.cfg.kv_cache_dim \
            * self.lm_head.weight.element_size()

    def use_ep(self, ep: EPGroup) -> None:
        """Shard every MoE layer's routed experts over the EP group (engine/ep.py)."""
        self.ep = ep
        for module in self.modules():
            if isinstance(module, MoE):
                module.shard(ep)

    def forward(self, batch: ForwardBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        """Final hidden states (before the final norm) of every packed token; with an EP
        group of two micro-batches, the rows split in two that run interleaved (drive())."""
        if self.ep is None or self.ep.micro_batches == 1:
            return drive([self._staged(batch, kv_cache)])[0]
        return torch.cat(drive([self._staged(b, kv_cache) for b in split_rows(batch)]))

    def _staged(self, batch: ForwardBatch, kv_cache: torch.Tensor):
        x = self.embed(batch.input_ids)
        for layer in self.layers:
            x = yield from cast(DecoderLayer, layer).staged(x, batch, kv_cache)
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(hidden))

    def mtp_hidden(self, hidden, next_ids, batch, kv_cache, depth: int = 0):
        """MTP module `depth` at every packed token (writing its KV layer); the shared
        lm_head on a row of the result gives that position's draft logits."""
        return self.mtp[depth](hidden, self.embed(next_ids), batch, kv_cache)
