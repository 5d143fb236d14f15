"""The model forward over the paged latent KV cache equals one dense causal forward.

The oracle below recomputes every layer over the whole sequence with plain causal MHA and
no cache; the model under test runs chunked prefills (MHA form over gathered latents) and
decode steps (absorbed form) through scattered cache blocks.
"""

import math

import numpy as np
import pytest
import torch

from engine.model import DeepSeekModel, ForwardBatch, rope
from engine.model_config import ModelConfig, load_model_config

TINY = ModelConfig(name="test-tiny", architecture="deepseek_v3", hidden_size=64,
                   num_hidden_layers=2, num_attention_heads=4, vocab_size=256, q_lora_rank=32,
                   kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                   first_k_dense_replace=1, intermediate_size=128, moe_intermediate_size=32,
                   n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                   num_nextn_predict_layers=1)
BLOCK = 4


def dense_logits(model, ids):
    cfg, s = model.cfg, len(ids)
    n, nope, lat = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.kv_lora_rank
    pos = torch.arange(s)
    x = model.embed(ids)
    for layer in model.layers:
        a, h = layer.attn, layer.attn_norm(x)
        q = a.wq_b(a.q_norm(a.wq_a(h))).view(s, n, cfg.qk_head_dim)
        q_nope, q_rope = q[..., :nope], rope(q[..., nope:], pos, cfg.rope_theta)
        kv = a.wkv_a(h)
        k_rope = rope(kv[:, lat:], pos, cfg.rope_theta)
        up = a.wkv_b(a.kv_norm(kv[:, :lat])).view(s, n, -1)
        k_nope, v = up[..., :nope], up[..., nope:]
        scores = (torch.einsum("qnd,knd->nqk", q_nope, k_nope)
                  + torch.einsum("qnd,kd->nqk", q_rope, k_rope)) / math.sqrt(cfg.qk_head_dim)
        scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
        out = torch.einsum("nqk,knd->qnd", torch.softmax(scores, -1), v)
        x = x + a.wo(out.flatten(1))
        x = x + layer.ffn(layer.ffn_norm(x))
    return model.logits(x)


def paged_batch(rows, tables):
    """rows: (token ids, first position, decode?) per sequence; tables: block ids per seq."""
    ids, positions, slots, starts, ks = [], [], [], [0], []
    for (tokens, first, _), table in zip(rows, tables):
        pos = torch.arange(first, first + len(tokens))
        ids.append(tokens)
        positions.append(pos)
        slots.append(table[pos // BLOCK] * BLOCK + pos % BLOCK)
        starts.append(starts[-1] + len(tokens))
        ks.append(first + len(tokens))
    width = max(len(t) for t in tables)
    padded = torch.stack([torch.cat((t, t.new_full((width - len(t),), -1))) for t in tables])
    return ForwardBatch(torch.cat(ids), torch.cat(positions), torch.cat(slots), starts, ks,
                        padded, [d for _, _, d in rows])


@pytest.mark.parametrize("seed", range(4))
def test_chunked_prefill_and_decode_match_dense_forward(seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = DeepSeekModel(TINY, seed=seed).eval()
    cache = model.new_kv_cache(num_blocks=64, block_size=BLOCK)
    blocks = torch.randperm(64)  # scattered, as a block pool hands them out
    lengths = [int(rng.integers(6, 20)), int(rng.integers(6, 20))]
    seqs = [torch.randint(0, TINY.vocab_size, (n,)) for n in lengths]
    tables = [blocks[:8], blocks[8:16]]
    want = [dense_logits(model, s) for s in seqs]
    got = [[], []]
    with torch.no_grad():
        done = [0, 0]
        prompt = [n - 4 for n in lengths]  # the last 4 tokens of each arrive by decoding
        while done != prompt:  # chunked prefill, both sequences in every step
            rows, live = [], []
            for i in range(2):
                if done[i] < prompt[i]:
                    chunk = min(int(rng.integers(1, 7)), prompt[i] - done[i])
                    rows.append((seqs[i][done[i]:done[i] + chunk], done[i], False))
                    live.append(i)
                    done[i] += chunk
            batch = paged_batch(rows, [tables[i] for i in live])
            logits = model.logits(model(batch, cache))
            for i, (start, end) in zip(live, zip(batch.query_start, batch.query_start[1:])):
                got[i].append(logits[start:end])
        for _ in range(4):  # decode, one token per sequence per step, absorbed attention
            rows = [(seqs[i][done[i]:done[i] + 1], done[i], True) for i in range(2)]
            logits = model.logits(model(paged_batch(rows, tables), cache))
            for i in range(2):
                got[i].append(logits[i:i + 1])
                done[i] += 1
    for i in range(2):
        paged = torch.cat(got[i])
        rel = (paged - want[i]).norm() / want[i].norm()
        assert rel < 1e-4, f"sequence {i}: relative error {rel:.2e}"


def test_mha_and_absorbed_attention_agree():
    model = DeepSeekModel(TINY, seed=7).eval()
    cache = model.new_kv_cache(num_blocks=16, block_size=BLOCK)
    tokens = torch.randint(0, TINY.vocab_size, (9,))
    table = torch.arange(3)
    with torch.no_grad():
        model(paged_batch([(tokens[:8], 0, False)], [table]), cache)
        last = [(tokens[8:], 8, decode) for decode in (False, True)]
        mha, absorbed = (model.logits(model(paged_batch([row], [table]), cache)) for row in last)
    assert torch.allclose(mha, absorbed, rtol=1e-4, atol=1e-5)


def test_only_deepseek_v3_blocks_have_a_torch_forward():
    with pytest.raises(ValueError, match="implements deepseek_v3 blocks, not deepseek_v4"):
        DeepSeekModel(load_model_config("deepseek-v4-flash"))
