"""A deployment's modeled step (csrc/deployment_model.cpp), each part against hand
arithmetic on DeepSeek-V3 over H800s (docs/modeling.md)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig, load_device_profile
from engine.deployment import Deployment
from engine.model_config import load_model_config

pytestmark = pytest.mark.core

V3 = load_model_config("deepseek-v3")
H800 = load_device_profile("H800")
FP8 = dict(attention="fp8", kv="bf16", dense="fp8", experts="fp8", dispatch="fp8",
           combine="bf16")
H, IM, E, K = V3.hidden_size, V3.moe_intermediate_size, V3.n_routed_experts, V3.num_experts_per_tok
MOE_LAYERS = V3.num_hidden_layers - V3.first_k_dense_replace  # 58
EXPERT = 3 * H * IM  # one expert's parameters

FLOPS = 1979e12 * H800.compute_efficiency.value  # FP8 peak x efficiency
HBM = 3.35e12 * H800.memory_efficiency.value
UP = 400e9 / 2 * H800.network_efficiency.value  # NVLink, one direction
OUT = 50e9 * H800.network_efficiency.value
UP_LAT, OUT_LAT = H800.scaleup_latency_us.value * 1e-6, H800.scaleout_latency_us.value * 1e-6
OVERHEAD = H800.step_overhead_us.value * 1e-6


def deployment(**kw):
    """The roofline step (the hand arithmetic below), not the H800's kernel tables."""
    return Deployment(precision=dict(FP8),
                      **{**dict(expert_imbalance=1.25, stack="roofline"), **kw})


def prefill(d, prompts, profile="H800"):
    """The first step's record: prompt i on DP rank i (round robin)."""
    cfg = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=65536, num_kv_blocks=4096,
                                                 block_size=64, dp_size=d.attention_dp),
                       model="deepseek-v3", executor=f"modeled:{profile}", precision="fp8",
                       deployment=d)
    engine = LLMEngine(cfg)
    for i, n in enumerate(prompts):
        engine.add_request(i, prompt_len=n, max_new_tokens=4)
    return engine, engine.step()


def breakdown(engine, n):
    return engine.estimator.calc_flops(np.array([n]), np.array([n]), phase="prompt")


def test_attention_and_dense_are_rooflines_of_their_own_work():
    engine, record = prefill(deployment(), [4096])
    f = breakdown(engine, 4096)
    b = f.executed_breakdown
    shared = b["moe"] * V3.n_shared_experts / (K + V3.n_shared_experts)
    attention_flops = b["attn_proj"] + b["kv_up"] + b["attn_core"]
    dense_flops = b["dense_ffn"] + b["router"] + b["lm_head"] + shared
    layer = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 128 * 128 * 7168 + 512 * 128 * 256
    kv = f.bytes_breakdown["kv_read"] + f.bytes_breakdown["kv_write"]
    dense_bytes = (3 * 3 * H * V3.intermediate_size + MOE_LAYERS * EXPERT + MOE_LAYERS * H * E
                   + H * V3.vocab_size)
    cost = record.flops[0]
    assert cost.attention_s == pytest.approx(max(attention_flops / FLOPS,
                                                 (61 * layer + kv) / HBM), rel=1e-9)
    assert cost.dense_s == pytest.approx(max(dense_flops / FLOPS, dense_bytes / HBM), rel=1e-9)
    assert cost.dispatch_s == cost.combine_s == cost.allreduce_s == 0  # one device


def test_experts_take_every_token_routed_times_the_imbalance():
    _, record = prefill(deployment(), [4096])
    flops = 4096 * MOE_LAYERS * K * 1.25 * 2 * EXPERT
    touched = E * -math.expm1(-4096 * K * 1.25 / E)
    assert record.flops[0].experts_s == pytest.approx(
        max(flops / FLOPS, MOE_LAYERS * touched * EXPERT / HBM), rel=1e-9)


def test_experts_are_shared_over_the_ep_group_and_every_rank_pays_the_hottest():
    d = deployment(devices=8, attention_dp=8, moe_ep=8)
    _, record = prefill(d, [2048] * 4)  # four ranks busy, four empty
    flops = 4 * 2048 * MOE_LAYERS * K * 1.25 / 8 * 2 * EXPERT
    assert [c.experts_s for c in record.flops] == pytest.approx([flops / FLOPS] * 8, rel=1e-9)
    assert [c.attention_s > 0 for c in record.flops] == [True] * 4 + [False] * 4


def test_an_idle_rank_runs_its_experts_share_and_waits_in_the_all_to_alls():
    d = deployment(devices=8, attention_dp=8, moe_ep=8)
    _, record = prefill(d, [2048, 1024])  # two ranks busy, six empty
    remote = 7 * (1 - (7 / 8) ** K)  # other devices a token's experts fall on
    received = 3072 * MOE_LAYERS * remote / 8 * 1.25  # the hottest device's share
    idle = list(record.flops)[2:]
    assert {(c.model_flops, c.bytes, c.attention_s, c.dense_s, c.allreduce_s)
            for c in idle} == {(0, 0, 0, 0, 0)}
    assert {c.experts_s for c in idle} == {record.flops[0].experts_s}
    assert [c.dispatch_s for c in idle] == pytest.approx(
        [MOE_LAYERS * UP_LAT + received * H * 1 / UP] * 6, rel=1e-9)
    assert [c.combine_s for c in idle] == pytest.approx(
        [MOE_LAYERS * UP_LAT + received * H * 2 / UP] * 6, rel=1e-9)
    busy = record.flops[0]  # one device, no overlap: its parts add, and it is the slowest
    parts = (busy.attention_s + busy.dense_s + busy.experts_s + busy.dispatch_s
             + busy.combine_s + busy.allreduce_s)
    assert record.forward_ns == pytest.approx((OVERHEAD + parts) * 1e9, abs=1)


def test_dispatch_and_combine_are_tokens_times_remote_devices_times_hidden():
    d = deployment(devices=2, attention_dp=2, moe_ep=2)
    _, record = prefill(d, [4096, 4096])
    remote = 1 - 0.5 ** K  # the other device holds one of a token's experts
    sent = 4096 * MOE_LAYERS * remote
    received = 2 * 4096 * MOE_LAYERS * remote / 2 * 1.25  # the hottest device's share
    assert received > sent
    cost = record.flops[0]
    assert cost.dispatch_s == pytest.approx(MOE_LAYERS * UP_LAT + received * H * 1 / UP,
                                            rel=1e-9)
    assert cost.combine_s == pytest.approx(MOE_LAYERS * UP_LAT + received * H * 2 / UP,
                                           rel=1e-9)


def test_beyond_the_scale_up_domain_a_token_crosses_scale_out_once_per_domain():
    d = deployment(devices=16, attention_dp=16, moe_ep=16, expert_imbalance=1.0)
    _, record = prefill(d, [1024] * 16)
    devices = 15 * (1 - (15 / 16) ** K)  # other devices among a token's top-k
    domains = 1 - (1 / 2) ** K  # the other node, unless all k fall on this one
    nvlink = 1024 * MOE_LAYERS * devices * H
    infiniband = 1024 * MOE_LAYERS * domains * H
    expected = MOE_LAYERS * OUT_LAT + max(nvlink / UP, infiniband / OUT)
    assert record.flops[0].dispatch_s == pytest.approx(expected, rel=1e-9)


def test_tp_attention_pays_a_ring_all_reduce_per_layer():
    d = deployment(devices=2, attention_tp=2, moe_ep=2)
    _, record = prefill(d, [4096])
    expected = 61 * (UP_LAT + 2 * (2 - 1) / 2 * 4096 * H * 2 / UP)
    assert record.flops[0].allreduce_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_two_micro_batches_overlap_communication_one_adds_it(micro_batches):
    d = deployment(devices=16, attention_dp=16, moe_ep=16, micro_batches=micro_batches)
    _, record = prefill(d, [1000 + 100 * i for i in range(16)])
    per_rank = []
    for c in record.flops:
        compute = c.attention_s + c.dense_s + c.experts_s
        comm = c.dispatch_s + c.combine_s + c.allreduce_s
        per_rank.append(max(compute, comm) if micro_batches == 2 else compute + comm)
    assert record.forward_ns == pytest.approx((OVERHEAD + max(per_rank)) * 1e9, abs=1)
    assert per_rank.index(max(per_rank)) == 15  # the longest prompt's rank is the slowest
    assert [c.rank_s for c in record.flops] == pytest.approx(per_rank, rel=1e-12)


def test_an_idle_rank_s_own_step_is_its_experts_and_all_to_alls():
    d = deployment(devices=8, attention_dp=8, moe_ep=8, micro_batches=1)
    _, record = prefill(d, [2048, 1024])  # ranks 2..7 idle
    idle = record.flops[7]
    assert idle.rank_s == pytest.approx(idle.experts_s + idle.dispatch_s + idle.combine_s,
                                        rel=1e-12)
    assert 0 < idle.rank_s < record.flops[1].rank_s < record.flops[0].rank_s


def _with_scaleout(factor):
    return replace(H800, scaleout_gb_s=replace(H800.scaleout_gb_s,
                                               value=H800.scaleout_gb_s.value * factor))


# EP32 over 4 nodes, 1K prompts: InfiniBand-bound; EP16 over 2 nodes, 16K prompts: compute
@pytest.mark.parametrize("devices, prompt, bound", [(32, 1024, "all-to-all"),
                                                    (16, 16384, "compute")])
def test_doubling_scale_out_bandwidth_shortens_only_an_all_to_all_bound_step(
        devices, prompt, bound, monkeypatch):
    d = deployment(devices=devices, attention_dp=devices, moe_ep=devices, micro_batches=2)
    steps = []
    for factor in (1, 2):
        monkeypatch.setattr("engine.executors.spec.load_device_profile",
                            lambda name, f=factor: _with_scaleout(f))
        _, record = prefill(d, [prompt] * devices)
        c = record.flops[0]
        compute = c.attention_s + c.dense_s + c.experts_s
        comm = c.dispatch_s + c.combine_s + c.allreduce_s
        steps.append((record.forward_ns, compute > comm))
    (before, compute_bound), (after, _) = steps
    if bound == "compute":
        assert compute_bound and after == before
    else:
        assert not compute_bound and after < 0.8 * before


def test_a_busy_rank_takes_at_least_its_layers_floor(monkeypatch):
    """docs/modeling.md, "The latency floor": a step of a few tokens is the floor; a step
    whose parts exceed it is unchanged; an idle rank has no floor."""
    from engine.devices.profile import Figure

    d = deployment(devices=8, attention_dp=8, moe_ep=8, micro_batches=1)
    plain = [prefill(d, prompts)[1] for prompts in ([4, 4], [8192])]
    floor = replace(H800, layer_floor_us=Figure(400.0, "assumption", "a test's"))
    monkeypatch.setattr("engine.executors.spec.load_device_profile", lambda name: floor)
    tiny, big = (prefill(d, prompts)[1] for prompts in ([4, 4], [8192]))
    layers_s = V3.num_hidden_layers * 400e-6
    assert plain[0].flops[0].rank_s < layers_s
    assert [tiny.flops[r].rank_s for r in (0, 1)] == pytest.approx([layers_s] * 2, rel=1e-12)
    assert tiny.forward_ns == pytest.approx((OVERHEAD + layers_s) * 1e9, abs=1)
    assert tiny.flops[7].rank_s == plain[0].flops[7].rank_s < layers_s  # idle: no floor
    assert plain[1].flops[0].rank_s > layers_s
    assert big.forward_ns == plain[1].forward_ns
