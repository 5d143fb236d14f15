"""The NVIDIA kernel tables derived from aiconfigurator-core 0.12.0 (engine/kernels/
aiconfigurator.py): the committed files, and the derivation's rules on hand-made frames.
Nothing here needs aiconfigurator-core installed."""

import importlib.metadata
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from engine.kernels import aiconfigurator as aic
from engine.kernels.table import read

KERNELS = Path(aic.__file__).parent
FAMILIES = {"gemm", "moe", "mla_decode", "mla_prefill", "mla_bmm", "dispatch", "combine",
            "all_reduce", "all_gather"}
V4_FAMILIES = {"v4_decode", "v4_prefill"}
TABLES = [(profile, stack) for profile in aic.SYSTEMS for stack in aic.STACKS]
# TensorRT-LLM collected DeepSeek-V4's attention modules on SM100 alone
NO_V4_ATTENTION = {("h100", "trtllm"), ("h200", "trtllm")}


@pytest.mark.parametrize("profile, stack", TABLES)
def test_each_committed_table_reads_whole_and_names_its_source(profile, stack):
    table = read(KERNELS / profile / f"{stack}.csv")
    name, version = table.stack.split(" ")
    assert (table.profile, name) == (profile, stack)
    assert table.source.startswith("aiconfigurator-core 0.12.0 (NVIDIA), collected data: ")
    assert f"gemm {stack} {version}" in table.source
    assert table.notice.startswith("Apache-2.0; Copyright (c) 2025-2026 NVIDIA CORPORATION")
    v4 = set() if (profile, stack) in NO_V4_ATTENTION else V4_FAMILIES
    assert {r.family for r in table.rows} == FAMILIES | v4
    assert {r.source for r in table.rows} == {"vendor"}
    assert (KERNELS / "NOTICE").read_text().count("Apache License") >= 2


def test_the_b200_tables_hold_deepseek_shapes_at_every_tp():
    rows = read(KERNELS / "b200" / "trtllm.csv").rows
    gemms = {(r.precision, r.n, r.k) for r in rows if r.family == "gemm"}
    for tp in aic.TPS:
        assert {("fp8", 7168, 16384 // tp), ("fp4", 36864 // tp, 7168),
                ("bf16", 129280 // tp, 7168)} <= gemms
    assert {r.width for r in rows if r.family == "moe"} == {1, 2, 4, 8, 16, 32, 64, 128, 256}
    assert max(r.tokens for r in rows if r.family == "moe") == 16384
    assert {r.heads for r in rows if r.family.startswith("mla")} == {16, 32, 64, 128}
    assert {r.topology for r in rows if r.family in ("dispatch", "combine")} == {"scaleup"}


def test_the_b200_tables_hold_deepseek_v4_flash_shapes():
    rows = read(KERNELS / "b200" / "trtllm.csv").rows
    gemms = {(r.precision, r.n, r.k) for r in rows if r.family == "gemm"}
    for tp in aic.TPS:  # the shared expert, the LM head
        assert {("fp8", 4096 // tp, 4096), ("fp8", 4096, 2048 // tp),
                ("bf16", 129280 // tp, 4096)} <= gemms
    assert ("bf16", 256, 4096) in gemms  # the router
    moe = {(r.precision, r.width) for r in rows if r.family == "moe" and r.n == 4096}
    assert {r.topk for r in rows if r.family == "moe" and r.n == 4096} == {6}
    assert {("fp8", 1), ("fp8", 8), ("fp4", 8)} <= moe
    for family in V4_FAMILIES:
        v4 = [r for r in rows if r.family == family]
        assert {(r.mode, r.heads) for r in v4} == {(m, h) for m in ("csa", "hca")
                                                  for h in (8, 16, 32, 64)}
        assert {(r.precision, r.n) for r in v4} == {("fp8", 4096)}


def module_frame(**overrides):
    base = dict(model="sgl-project/DeepSeek-V4-Flash-FP8", mla_dtype="bfloat16",
                kv_cache_dtype="fp8_e4m3", gemm_type="fp8_block", num_heads=8, tp_size=8,
                batch_size=4, isl=1, step=4096, latency=0.1)
    return {**base, **overrides}


def test_v4_module_rows_are_flashs_fp8_ones_with_decode_context_isl_plus_step():
    frame = pd.DataFrame([
        module_frame(),
        module_frame(gemm_type="bfloat16", latency=9.0),  # BF16 projections
        module_frame(model="deepseek-ai/DeepSeek-V4-Pro", num_heads=8, tp_size=16,
                     latency=9.0),  # V4-Pro's 128 heads
        module_frame(latency=9.0),  # a repeat: the first wins
    ])
    (r,) = aic.v4_attention_rows(frame, "v4_decode", "hca", None)
    assert (r.family, r.mode, r.precision, r.n, r.heads) == ("v4_decode", "hca", "fp8", 4096, 8)
    assert (r.tokens, r.context, r.time_us) == (4, 4097, pytest.approx(100.0))
    prefill = pd.DataFrame([module_frame(isl=2048, step=128, batch_size=1),
                            module_frame(isl=2048, step=128, batch_size=2)])
    (r,) = aic.v4_attention_rows(prefill, "v4_prefill", "csa", None)
    assert (r.tokens, r.context) == (2048, 128)


def calib_frame(mode, step, latency, isl=1, batch_size=4, num_heads=64):
    return dict(score_mode=mode, step=step, isl=isl, batch_size=batch_size,
                num_heads=num_heads, latency=latency)


def test_a_csa_row_is_less_its_topk_delta_where_calibrated():
    """aiconfigurator subtracts the topK's flat - top_last (decode: the v2 selector at
    past_kv = context - 1), collected or interpolated in prefix, held past the ends."""
    topk = aic.TopkDelta.of(pd.DataFrame([
        calib_frame("v2_flat", 4096, 0.05), calib_frame("v2_top_last", 4096, 0.01),
        calib_frame("v2_flat", 8192, 0.09), calib_frame("v2_top_last", 8192, 0.01),
        calib_frame("v2_flat", 4096, 0.5, num_heads=128),  # V4-Pro's
        calib_frame("v1_flat", 4096, 0.02), calib_frame("v1_top_last", 4096, 0.03)]))
    assert topk.at("v2", 4096, 1, 4) == pytest.approx(0.04)
    assert topk.at("v2", 6144, 1, 4) == pytest.approx(0.06)
    assert topk.at("v2", 1 << 20, 1, 4) == pytest.approx(0.08)
    assert topk.at("v1", 4096, 1, 4) == 0.0  # top_last slower: no delta
    (r,) = aic.v4_attention_rows(pd.DataFrame([module_frame()]), "v4_decode", "csa", topk)
    assert r.time_us == pytest.approx(60.0)
    with pytest.raises(aic.DataError, match="the topK delta takes the whole 0.02 ms"):
        aic.v4_attention_rows(pd.DataFrame([module_frame(latency=0.02)]), "v4_decode", "csa",
                              topk)


def moe_frame(**overrides):
    base = dict(moe_dtype="nvfp4", kernel_source="moe_torch_flow_cutlass", num_tokens=64,
                hidden_size=7168, inter_size=2048, topk=8, num_experts=256, moe_tp_size=1,
                moe_ep_size=8, distribution="balanced", latency=0.2)
    return {**base, **overrides}


def test_moe_takes_the_fastest_kernel_collected_at_each_shape_and_converts_to_us():
    frame = pd.DataFrame([
        moe_frame(),
        moe_frame(kernel_source="moe_torch_flow_min_latency", latency=0.1),
        moe_frame(num_tokens=256, latency=0.3),
        moe_frame(num_tokens=256, kernel_source="moe_torch_flow_min_latency", latency=0.01),
        moe_frame(moe_dtype="fp8_block", kernel_source="deepgemm", latency=0.4),
        moe_frame(distribution="power_law_1.01", latency=9.0),
        moe_frame(hidden_size=4096, latency=9.0),
    ])
    got = {(r.precision, r.tokens): r.time_us for r in aic.moe_rows(frame)}
    assert got == {("fp4", 64): 100.0, ("fp4", 256): 10.0, ("fp8", 64): 400.0}


def test_mla_decode_context_is_isl_plus_step():
    frame = pd.DataFrame([dict(kv_cache_dtype="fp8", num_heads=128, batch_size=4, isl=1,
                               step=4095, latency=0.05)])
    (r,) = aic.mla_decode_rows(frame)
    assert (r.tokens, r.context, r.heads, r.precision, r.time_us) == (4, 4096, 128, "fp8", 50.0)


def test_a_curve_keeps_its_largest_full_grid_less_spikes():
    grid = {2: {1, 2, 4, 8}, 64: {1, 2, 4, 8}, 4096: {1, 2, 4}, 65536: {1, 2}}
    assert aic.full_grid(grid) == ({1, 2, 4}, [2, 64, 4096])
    assert aic.spikes([(1, 10.0), (2, 11.0), (4, 40.0), (8, 12.0), (16, 50.0)]) == {4}
    rows = [aic.row("mla_decode", t, us, context=c, heads=128, precision="bf16")
            for c, times in ((2, (10, 11, 1500, 12)), (64, (10, 11, 12, 13)),
                             (4096, (20, 21, 22, 23)))
            for t, us in zip((1, 2, 4, 8), times)]
    kept, dropped = aic.tidy(rows)
    assert [(r.tokens, r.context) for r in dropped] == [(4, 2)]
    assert sorted({r.context for r in kept}) == [64, 4096] and len(kept) == 8  # 8 cells > 2 x 3


def test_collectives_are_read_at_whole_token_counts_between_collected_sizes():
    sizes = pd.Series([4096, 8192, 16384, 32768]).to_numpy(float)
    points = aic.at_tokens(sizes, sizes / 1000, 7168)
    assert [t for t, _ in points] == [1, 2, 4]
    assert points[0][1] == pytest.approx(7.168)


def sol(m, n, k):
    return m * n * k * 1e-9


def test_an_uncollected_gemm_takes_the_nearest_sites_utilisation():
    frame = pd.DataFrame([dict(m=m, n=n, k=1024, latency=sol(m, n, 1024) / util)
                          for n, util in ((1024, 0.5), (4096, 0.25), (65536, 0.9))
                          for m in (16, 32)])
    sites = aic.Sites.of(frame)
    # both 1 octave away, equal weights: the mean utilisation, 0.375; 65536 is 4 octaves away
    assert sites.transfer(16, 2048, 1024, sol) == pytest.approx(sol(16, 2048, 1024) / 0.375)
    assert sites.transfer(64, 2048, 1024, sol) is None  # no site swept m = 64
    assert sites.transfer(16, 1 << 22, 1024, sol) is None  # none within 2 octaves


def test_gemm_rows_pass_collected_sites_through_and_floor_them_at_sol():
    gpu = {"bfloat16_tc_flops": 1e15, "mem_bw": 1e12}
    floor = aic.gemm_sol(gpu, "bfloat16")
    frame = pd.DataFrame([dict(gemm_dtype="bfloat16", m=m, n=256, k=7168, latency=latency)
                          for m, latency in ((1, 1.0), (2, floor(2, 256, 7168) / 2))])
    got = {r.tokens: r.time_us for r in aic.gemm_rows(frame, gpu) if (r.n, r.k) == (256, 7168)}
    assert got == pytest.approx({1: 1000.0, 2: floor(2, 256, 7168) * 1000})


def test_sglang_deepep_widths_span_the_collected_node():
    frame = pd.DataFrame([dict(node_num=1, hidden_size=7168, num_token=128, num_topk=8,
                               num_experts=256, dispatch_avg_t_us=30.0, combine_avg_t_us=40.0)])
    rows = aic.deepep_rows(frame, "low_latency", gpus_per_node=4)
    assert {(r.family, r.precision, r.width, r.topology, r.time_us) for r in rows} == {
        ("dispatch", "fp8", 4, "scaleup", 30.0), ("combine", "bf16", 4, "scaleup", 40.0)}


def test_the_newest_collection_at_or_below_the_current_version(tmp_path):
    for version in ("1.3.0rc10", "1.3.0rc11", "1.3.0rc23"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "moe_a2a_perf.parquet").touch()
    (tmp_path / "1.3.0rc20").mkdir()
    assert aic.collection(tmp_path, "moe_a2a_perf.parquet", "1.3.0rc20")[0] == "1.3.0rc11"
    assert aic.collection(tmp_path, "moe_a2a_perf.parquet", None)[0] == "1.3.0rc23"
    assert aic.collection(tmp_path, "gemm_perf.parquet", "1.3.0rc20") is None


def test_without_aiconfigurator_0_12_0_the_script_says_what_to_install(monkeypatch, capsys):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert aic.main(["--out", "unused"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: aiconfigurator-core is not installed; the tables derive from its collected "
        "data: pip install aiconfigurator-core==0.12.0")
    engine = importlib.util.find_spec("engine")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.13.0")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: engine)
    with pytest.raises(aic.DataError, match="0.13.0 is installed, but the tables derive from "
                                            "0.12.0 exactly"):
        aic.systems_dir()
