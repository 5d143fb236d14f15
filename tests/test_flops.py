"""FlopsEstimator against hand-computed values and docs/design/hardware_and_models.md §3.

Doc figures are compared within half a unit of their last printed digit: the doc rounds
its arithmetic, so that is the tolerance its own derivation allows (73.25 -> +-0.005 GF,
142.8 -> +-0.05 GF).
"""

import dataclasses

import numpy as np
import pytest

from engine.attention_cost import block_pairs, causal_pairs, clipped_pairs
from engine.flops import FlopsEstimator
from engine.model_config import load_model_config
from engine.plan import KIND_CHUNK, KIND_DECODE, KIND_FINAL

pytestmark = pytest.mark.core

G = 1e9
V3 = load_model_config("deepseek-v3")
V4F = load_model_config("deepseek-v4-flash")
V32 = dataclasses.replace(V3, name="deepseek-v3.2", index_n_heads=64, index_head_dim=128,
                          index_topk=2048)  # §2.1: V3.2 = V3 + the DSA indexer
H, N, L, VOCAB = 7168, 128, 61, 129280
HEAD = 2 * H * VOCAB  # 1.853 GF per logits position
V3_LINEAR = ("attn_proj", "kv_up", "dense_ffn", "moe", "router", "lm_head")


def one(est, q, k, phase, **kw):
    return est.calc_flops(np.array([q]), np.array([k]), phase,
                          **{n: np.array([v]) for n, v in kw.items()})


def gf(x):
    return x / G


@pytest.fixture(scope="module")
def v3():
    return FlopsEstimator(V3)


# --- causal pair sums -------------------------------------------------------------------

def brute(q, k, f):
    return sum(f(p) for p in range(k - q + 1, k + 1))


def test_pairs_formula():
    assert causal_pairs(np.array([1]), np.array([4096]))[0] == 4096  # decode: k
    assert causal_pairs(np.array([1024]), np.array([1024]))[0] == 1024 * 1025 // 2  # s(s+1)/2
    assert causal_pairs(np.array([3]), np.array([10]))[0] == 8 + 9 + 10


def test_pair_sums_match_brute_force():
    qs, ks = zip(*[(q, k) for k in range(0, 70) for q in range(0, k + 1)])
    q, k = np.array(qs), np.array(ks)
    assert causal_pairs(q, k).tolist() == [brute(a, b, lambda p: p) for a, b in zip(qs, ks)]
    for cap in (1, 7, 128):
        assert clipped_pairs(q, k, cap).tolist() == \
            [brute(a, b, lambda p: min(p, cap)) for a, b in zip(qs, ks)]
    for ratio in (3, 4, 128):
        for cap in (None, 1, 5):
            def f(p):
                return p // ratio if cap is None else min(p // ratio, cap)
            assert block_pairs(q, k, ratio, cap).tolist() == \
                [brute(a, b, f) for a, b in zip(qs, ks)], (ratio, cap)


# --- DeepSeek-V3 (§3.2-3.6) -------------------------------------------------------------

def test_v3_decode_4096_matches_doc(v3):
    f = one(v3, 1, 4096, "decode")
    linear = sum(f.model_breakdown[n] for n in V3_LINEAR)
    assert abs(gf(linear) - 73.25) <= 0.005
    assert abs(gf(linear - f.model_breakdown["kv_up"]) - 71.2) <= 0.05
    assert abs(gf(f.model_flops) - 142.8) <= 0.05
    assert f.executed_flops == f.model_flops


@pytest.mark.parametrize("context, doc_gf, half_unit",
                         [(1024, 90.6, 0.05), (32768, 630, 0.5), (131072, 2300, 0.5)])
def test_v3_decode_other_contexts(v3, context, doc_gf, half_unit):
    assert abs(gf(one(v3, 1, context, "decode").model_flops) - doc_gf) <= half_unit


def test_v3_mla_projection_per_layer(v3):
    f = one(v3, 1, 1, "decode")
    assert f.model_breakdown["attn_proj"] / L == 2 * (H * 1536 + 1536 * N * 192 + H * 576
                                                      + N * 128 * H)
    assert abs(f.model_breakdown["attn_proj"] / L / 1e6 - 340.7) <= 0.05


def test_mha_and_absorbed_cost_per_pair(v3):
    # one more key adds one (q, k) pair per layer; the projections do not change
    def per_pair(phase):
        a, b = one(v3, 1, 1, phase), one(v3, 1, 2, phase)
        return (b.model_breakdown["attn_core"] - a.model_breakdown["attn_core"]) / L
    assert per_pair("prompt") == 2 * N * 192 + 2 * N * 128 == 81_920
    assert per_pair("decode") == 2 * N * 576 + 2 * N * 512 == 278_528


@pytest.mark.parametrize("s, doc_gf", [(1024, 75.8), (4096, 83.5), (32768, 155.1)])
def test_v3_prefill_average_per_token(v3, s, doc_gf):
    # the doc's averages put the LM head on every token; by default only the last one
    every = one(v3, s, s, "prompt", num_logits=s)
    assert abs(gf(every.model_flops) / s - doc_gf) <= 0.05
    last = one(v3, s, s, "prompt")
    assert every.model_flops - last.model_flops == pytest.approx((s - 1) * HEAD, rel=1e-12)


def test_lm_head_only_on_logits_positions(v3):
    kinds = np.array([KIND_CHUNK, KIND_FINAL, KIND_DECODE])
    f = v3.calc_flops(np.array([100, 100, 3]), np.array([100, 300, 5000]), kind=kinds,
                      accepted=np.array([0, 0, 2]))
    assert f.model_breakdown["lm_head"] == (0 + 1 + 3) * HEAD
    assert one(v3, 100, 100, "prompt").model_breakdown["lm_head"] == HEAD
    assert one(v3, 100, 100, "prompt", num_logits=0).model_breakdown["lm_head"] == 0
    with pytest.raises(ValueError, match="num_logits 101 exceeds"):
        one(v3, 100, 100, "prompt", num_logits=101)


# --- model vs executed ------------------------------------------------------------------

def test_padding_adds_executed_not_model_flops(v3):
    plain = one(v3, 1000, 5000, "prompt")
    padded = one(v3, 1000, 5000, "prompt", padded_q=1024)
    assert padded.model_flops == plain.model_flops
    # the padding runs as 24 more positions at the end of the chunk
    assert padded.executed_flops == one(v3, 1024, 5024, "prompt").executed_flops
    assert padded.executed_flops > plain.executed_flops


def test_rejected_drafts_add_executed_not_model_flops(v3):
    kept = one(v3, 3, 4096, "decode", accepted=2)
    rejected = one(v3, 3, 4096, "decode", accepted=0)  # None means none accepted too
    assert one(v3, 3, 4096, "decode").model_flops == rejected.model_flops
    assert kept.model_flops == kept.executed_flops == rejected.executed_flops
    assert rejected.model_flops == one(v3, 1, 4094, "decode").model_flops
    assert rejected.executed_flops > rejected.model_flops


def test_reup_projection_of_cached_prefix_is_executed_only(v3):
    f = one(v3, 512, 4096, "prompt")  # a chunk after 3584 cached tokens
    kv_b = 512 * N * (128 + 128)
    assert f.model_breakdown["kv_up"] == 2 * kv_b * 512 * L
    assert f.executed_breakdown["kv_up"] == 2 * kv_b * 4096 * L
    assert f.executed_flops - f.model_flops == 2 * kv_b * (4096 - 512) * L


def test_mtp_module_is_executed_only(v3):
    base = one(v3, 1, 4096, "decode")
    f = one(v3, 1, 4096, "decode", mtp_q=1)
    assert f.model_flops == base.model_flops
    layer = (340_656_128 + 2 * 512 * N * 256 + 278_528 * 4096  # MLA layer, absorbed
             + 2 * 3 * H * 2048 * 9 + 2 * H * 256)  # MoE: 8 routed + 1 shared, router
    assert f.executed_breakdown["mtp"] == 2 * 2 * H * H + layer + HEAD
    assert f.executed_flops == base.executed_flops + f.executed_breakdown["mtp"]


# --- DSA (V3.2, §3.4) and V4-Flash (§3.7) ------------------------------------------------

@pytest.mark.parametrize("context, doc_gf", [(1024, 93.4), (4096, 113.8), (32768, 142.5),
                                             (131072, 240.7)])
def test_v32_dsa_decode_matches_doc(context, doc_gf):
    assert abs(gf(one(FlopsEstimator(V32), 1, context, "decode").model_flops) - doc_gf) <= 0.05


def test_v4_flash_linear_per_token():
    f = one(FlopsEstimator(V4F), 1, 4096, "decode")
    b = f.model_breakdown
    # the doc's 25.5 sums attention projections, MoE, routers and the LM head
    assert abs(gf(b["attn_proj"] + b["moe"] + b["router"] + b["lm_head"]) - 25.5) <= 0.05
    assert "dense_ffn" not in b and "kv_up" not in b
    # compressor and indexer projections, from the reference module shapes: 21 CSA layers
    # (wkv + wgate of width 2*512, indexer wq_b, weights_proj, its 2*128 compressor) and
    # 20 HCA layers (wkv + wgate of width 512)
    H4 = 4096
    assert b["compressor"] == 2 * (21 * 2 * H4 * 2 * 512 + 20 * 2 * H4 * 512)
    assert b["indexer_proj"] == 2 * 21 * (1024 * 64 * 128 + H4 * 64 + 2 * H4 * 2 * 128)
    # 3 hash-routed layers have no router GEMM
    assert b["router"] == 2 * 40 * H4 * 256


@pytest.mark.parametrize("context, core_gf, core_half, index_gf, index_half",
                         [(4096, 2.2, 0.05, 0.35, 0.005), (131072, 4.8, 0.05, 11.3, 0.05),
                          (1048576, 23.6, 0.05, 90, 0.5)])
def test_v4_flash_attention_matches_doc(context, core_gf, core_half, index_gf, index_half):
    b = one(FlopsEstimator(V4F), 1, context, "decode").model_breakdown
    assert abs(gf(b["attn_core"]) - core_gf) <= core_half
    assert abs(gf(b["index_scores"]) - index_gf) <= index_half


# --- batches ------------------------------------------------------------------------------

def random_batch(rng, n):
    kind = rng.choice([KIND_CHUNK, KIND_FINAL, KIND_DECODE], n)
    q = np.where(kind == KIND_DECODE, rng.integers(1, 4, n), rng.integers(1, 3000, n))
    k = q + rng.integers(0, 200_000, n)
    pad = q + rng.integers(0, 8, n)
    accepted = np.where(kind == KIND_DECODE, rng.integers(0, q), 0)
    mtp = rng.integers(0, 3, n)
    return dict(seqlen_q=q, seqlen_k=k, kind=kind, padded_q=pad, accepted=accepted,
                mtp_q=mtp)


@pytest.mark.parametrize("model", [V3, V32, V4F, load_model_config("tiny")],
                         ids=lambda m: m.name)
def test_batch_equals_sum_of_singles(model):
    est = FlopsEstimator(model)
    batch = random_batch(np.random.default_rng(7), 24)
    whole = est.calc_flops(**batch)
    singles = [est.calc_flops(**{n: v[i:i + 1] for n, v in batch.items()})
               for i in range(24)]
    for field in ("model_flops", "executed_flops"):
        assert getattr(whole, field) == pytest.approx(sum(getattr(s, field) for s in singles),
                                                      rel=1e-12)
    for field in ("kv_read", "kv_write"):
        assert whole.bytes_breakdown[field] == pytest.approx(
            sum(s.bytes_breakdown[field] for s in singles), rel=1e-12)
    # weights are read once per step, so a batch reads less than its rows apart
    weights = [s.bytes_breakdown["weights"] for s in singles]
    assert max(weights) <= whole.bytes_breakdown["weights"] < sum(weights)


def test_empty_batch_costs_nothing(v3):
    f = v3.calc_flops(np.array([], int), np.array([], int), "decode")
    assert f.model_flops == f.executed_flops == f.bytes == 0


# --- bytes ----------------------------------------------------------------------------------

def test_v3_decode_bytes(v3):
    f = one(v3, 1, 4096, "decode")
    # one token touches the activated parameters: 36.6B incl. the 0.9B head (§2.1), FP8
    assert abs(gf(f.bytes_breakdown["weights"]) - 36.6) <= 0.05
    assert f.bytes_breakdown["kv_read"] == 4096 * 576 * L * 2
    assert f.bytes_breakdown["kv_write"] == 1 * 576 * L * 2


def test_expected_distinct_experts(v3):
    one_token = one(v3, 1, 1, "decode").bytes_breakdown["weights"]
    two_tokens = v3.calc_flops(np.array([1, 1]), np.array([1, 1]), "decode")
    expert = 3 * H * 2048  # bytes at FP8
    distinct = 256 * (1 - (1 - 8 / 256) ** 2)  # 15.75: the two tokens' picks overlap
    assert two_tokens.bytes_breakdown["weights"] - one_token == \
        pytest.approx((distinct - 8) * expert * 58, rel=1e-12)


@pytest.mark.parametrize("model, total_b", [(V3, 671), (V4F, 284)], ids=["v3", "v4-flash"])
def test_huge_batch_touches_every_weight(model, total_b):
    # every expert touched: weights plus the embedding are the published totals (§2)
    f = one(FlopsEstimator(model), 10**7, 10**7, "prompt")
    embedding = model.hidden_size * model.vocab_size
    assert abs(gf(f.bytes_breakdown["weights"] + embedding) - total_b) <= 0.5


def test_byte_sizes_are_parameters():
    base = one(FlopsEstimator(V4F), 1, 4096, "decode").bytes_breakdown
    fp4 = one(FlopsEstimator(V4F, expert_weight_bytes=0.5, kv_bytes=1.0), 1, 4096,
              "decode").bytes_breakdown
    routed = 6 * 3 * 4096 * 2048 * 43
    assert base["weights"] - fp4["weights"] == pytest.approx(0.5 * routed, rel=1e-12)
    assert fp4["kv_read"] < base["kv_read"]


# --- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    (dict(seqlen_q=[5], seqlen_k=[4], phase="prompt"), "seqlen_k < seqlen_q"),
    (dict(seqlen_q=[1], seqlen_k=[4], phase="both"), "phase must be one of"),
    (dict(seqlen_q=[1], seqlen_k=[4], phase="prefill"), "one of prompt, decode, got 'prefill'"),
    (dict(seqlen_q=[1], seqlen_k=[4], kind=[7]), "not a KIND_"),
    (dict(seqlen_q=[1], seqlen_k=[4]), "exactly one of phase"),
    (dict(seqlen_q=[1], seqlen_k=[4], phase="decode", kind=[2]), "exactly one of phase"),
    (dict(seqlen_q=[1], seqlen_k=[4, 5], phase="decode"), "seqlen_k has 2 values"),
    (dict(seqlen_q=[1.5], seqlen_k=[4], phase="decode"), "must hold integers"),
    (dict(seqlen_q=[0], seqlen_k=[4], phase="decode"), "computes no position"),
    (dict(seqlen_q=[2], seqlen_k=[4], phase="decode", accepted=[2]), "accepted >"),
    (dict(seqlen_q=[2], seqlen_k=[4], phase="prompt", accepted=[1]), "prefill row"),
    (dict(seqlen_q=[2], seqlen_k=[4], phase="decode", padded_q=[1]), "padded_q < seqlen_q"),
    (dict(seqlen_q=[2], seqlen_k=[-4], phase="decode"), "seqlen_k\\[0\\] is negative"),
])
def test_bad_input_names_the_problem(v3, kw, match):
    with pytest.raises(ValueError, match=match):
        v3.calc_flops(**{n: (np.array(v) if isinstance(v, list) else v)
                         for n, v in kw.items()})


def test_a_prefix_hit_is_not_computed_but_its_kv_is_read(v3):
    # 1,024 prompt tokens of which 768 came from the prefix cache: the row computes 256
    # positions (seqlen_q) over 1,024 keys (seqlen_k).
    hit = one(v3, 256, 1024, "prompt")
    whole = one(v3, 1024, 1024, "prompt")
    fresh = one(v3, 256, 256, "prompt")
    assert fresh.model_flops < hit.model_flops < whole.model_flops
    assert hit.model_breakdown["attn_proj"] == fresh.model_breakdown["attn_proj"]
    assert hit.bytes_breakdown["kv_read"] == whole.bytes_breakdown["kv_read"] \
        > fresh.bytes_breakdown["kv_read"]
    assert hit.bytes_breakdown["kv_write"] == fresh.bytes_breakdown["kv_write"]
