"""The workload's `deployment:` section: what no serving engine could run is refused by key,
weights that do not fit are refused with the numbers, and `num_kv_blocks: auto` is what
memory leaves."""

import subprocess
import sys

import pandas as pd
import pytest

from engine.deployment import Deployment
from engine.device_memory import kv_bytes_per_token, routed_expert_bytes, weight_bytes
from engine.model_config import load_model_config
from harness.workload import WorkloadError, load_workload

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

BASE = """trace:
  generate: {requests: 4, rate: 10, prompt: {fixed: 64}, output: {fixed: 4}}
model: deepseek-v3
device: modeled:H200
precision: fp8
calibration_requests: 0
telemetry: {enabled: false}
"""
EP8 = ["deployment.devices=8"]  # DP attention on 8 devices, EP8: the default degrees


def load(tmp_path, *overrides, body=BASE):
    path = tmp_path / "w.yaml"
    path.write_text(body)
    return load_workload(path, tuple(overrides) + (f"output={tmp_path / 'results'}",))


def refused(tmp_path, *overrides, body=BASE) -> str:
    with pytest.raises(WorkloadError) as e:
        load(tmp_path, *overrides, body=body)
    return str(e.value)


def test_deepseek_v3_on_one_h200_is_refused_with_the_numbers(tmp_path):
    message = refused(tmp_path)
    assert "w.yaml: deployment: deepseek-v3 fp8 on 1 x H200: weights about 683 GB per " \
           "device > 127 GB per device (memory_utilization 0.9 of its 141 GB of HBM); " \
           "shard the experts, e.g. moe.ep >= 8" in message


def test_an_emulated_device_is_checked_and_sized_as_a_modeled_one(tmp_path):
    assert "weights about 683 GB per device > 127 GB" in refused(tmp_path, "device=emulated:H200")
    emulated = load(tmp_path, *EP8, "device=emulated:H200").values["engine"]
    assert emulated["num_kv_blocks"] == load(tmp_path, *EP8).values["engine"]["num_kv_blocks"]
    assert emulated["dp_size"] == 8


@pytest.mark.slow  # a steptrace process of its own
def test_the_cli_refuses_it_with_exit_2_and_writes_nothing(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + f"output: {tmp_path / 'results'}\n")
    for command in ("validate", "run"):
        proc = subprocess.run([sys.executable, "-m", "harness.commands", command, str(path)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "weights about 683 GB per device > 127 GB" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_auto_is_what_memory_leaves_per_dp_rank(tmp_path):
    w = load(tmp_path, *EP8, "engine.block_size=64")
    engine = w.values["engine"]
    cfg = load_model_config("deepseek-v3")
    d = Deployment.from_values(w.values["deployment"], "fp8")
    left = 141e9 * 0.9 - weight_bytes(cfg, d)
    assert engine["num_kv_blocks"] == int(left // (64 * kv_bytes_per_token(cfg, d)))
    assert engine["dp_size"] == 8
    # BF16 latent KV of 61 + 1 (MTP) layers: (512 + 64) x 2 bytes each
    assert kv_bytes_per_token(cfg, d) == 62 * 576 * 2


def test_weights_shard_as_the_deployment_says():
    cfg = load_model_config("deepseek-v3")
    fp8 = dict(attention="fp8", kv="fp8", dense="fp8", experts="fp8", dispatch="fp8",
               combine="bf16")
    one = weight_bytes(cfg, Deployment(precision=fp8))
    assert 680e9 < one < 690e9  # 671B parameters + the 14B MTP module, one byte each
    expert = 3 * 7168 * 2048
    moe_layers = 58 + 1  # and the MTP module's
    ep8 = weight_bytes(cfg, Deployment(devices=8, attention_dp=8, moe_ep=8, precision=fp8))
    assert one - ep8 == pytest.approx(moe_layers * 256 * expert * 7 / 8)
    redundant = weight_bytes(cfg, Deployment(devices=8, attention_dp=8, moe_ep=8,
                                             redundant_experts=32, precision=fp8))
    assert redundant - ep8 == pytest.approx(moe_layers * 32 / 8 * expert)


def test_int8_weights_take_one_byte():
    cfg = load_model_config("deepseek-v3")
    int8 = dict(attention="int8", kv="bf16", dense="int8", experts="int8", dispatch="int8",
                combine="bf16")
    bf16 = dict(int8, attention="bf16", dense="bf16", experts="bf16")
    ep16 = dict(devices=16, attention_dp=16, moe_ep=16)
    one = weight_bytes(cfg, Deployment(**ep16, precision=int8))
    assert one == pytest.approx(weight_bytes(cfg, Deployment(**ep16, precision=bf16)) / 2)
    # 256 / 16 routed experts of 3 x 7168 x 2048 in each of 58 + 1 (MTP) MoE layers, a byte each
    assert routed_expert_bytes(cfg, Deployment(**ep16, precision=int8)) == 59 * 16 * 3 * 7168 * 2048
    assert 680e9 < weight_bytes(cfg, Deployment(precision=int8)) < 690e9


def test_an_int8_deployment_on_910c_runs_at_the_int8_peak(tmp_path):
    """W8A8 DeepSeek-V3 on 16 Ascend 910C (DP16, EP16): the pool is what 128 GB leaves, MFU is
    against the 1,504 TOPS INT8 peak."""
    from harness.sweeps.sweep import run_workload

    w = load(tmp_path, "device=modeled:Ascend 910C", "precision=int8", "deployment.devices=16",
             "engine.block_size=64", "trace.generate.requests=32", "trace.generate.rate=1000")
    cfg = load_model_config("deepseek-v3")
    d = Deployment.from_values(w.values["deployment"], "int8")
    assert d.precision["experts"] == d.precision["dispatch"] == "int8"
    left = 128e9 * 0.9 - weight_bytes(cfg, d)
    assert w.values["engine"]["num_kv_blocks"] == int(left // (64 * kv_bytes_per_token(cfg, d)))
    (run,) = run_workload(w)
    run_dir = run.path
    steps = pd.read_parquet(run_dir / "steps.parquet", columns=["step", "experts_s",
                                                                "dispatch_s"])
    assert (steps["experts_s"] > 0).any() and (steps["dispatch_s"] > 0).any()
    summary = pd.read_parquet(run_dir / "summary.parquet").set_index(["metric", "stat"])
    achieved = summary.loc[("achieved", "tflops_per_device"), "value"]
    assert summary.loc[("mfu", "model"), "value"] == pytest.approx(achieved / 1504)


def test_an_explicit_pool_larger_than_memory_allows_is_refused(tmp_path):
    fits = load(tmp_path, *EP8, "engine.block_size=64").values["engine"]["num_kv_blocks"]
    assert load(tmp_path, *EP8, "engine.block_size=64",
                f"engine.num_kv_blocks={fits}").values["engine"]["num_kv_blocks"] == fits
    message = refused(tmp_path, *EP8, "engine.block_size=64", f"engine.num_kv_blocks={fits + 1}")
    assert f"engine.num_kv_blocks: deepseek-v3 fp8 on 8 x H200: {fits + 1} KV blocks of 64 " \
           f"tokens need" in message and f"leaves room for {fits}" in message


@pytest.mark.parametrize("overrides, message", [
    (["deployment.devices=8", "deployment.attention.dp=3"],
     "deployment.attention: dp x tp must equal devices (8), got dp 3 x tp 1"),
    (["deployment.devices=8", "deployment.moe.ep=3"],
     "deployment.moe: ep x tp must equal devices (8), got ep 3 x tp 1"),
    (["deployment.devices=12", "deployment.moe.ep=12"],
     "deployment.moe.ep: must divide the routed experts plus the redundant ones (256 + 0), got 12"),
    (["deployment.devices=512", "deployment.moe.ep=512"],
     "deployment.moe.ep: 512 is more than deepseek-v3's 256 routed experts"),
    (["deployment.devices=16", "deployment.attention.tp=16"],
     "deployment.attention.tp: a TP group of 16 is wider than H200's scale-up domain of 8 "
     "devices"),
    (["deployment.devices=8", "deployment.precision.experts=fp4"],
     "deployment.precision.experts: H200 has no published dense fp4 peak; published: bf16, "
     "fp8, int8"),
    (["device=modeled:Ascend 910C", "precision=int8", "deployment.devices=16",
      "deployment.precision.experts=fp8"],
     "deployment.precision.experts: Ascend 910C has no published dense fp8 peak; published: "
     "bf16, int8"),
    (["device=modeled:Ascend 950DT", "deployment.devices=8", "deployment.precision.dense=int8"],
     "deployment.precision.dense: Ascend 950DT has no published dense int8 peak; published: "
     "fp8, fp4"),
    (["device=modeled:Ascend 950DT", "precision=int8", "deployment.devices=8"],
     "precision: Ascend 950DT: no published dense int8 peak; published precisions: fp8, fp4"),
    (["device=modeled:Ascend 910C", "deployment.devices=16"],
     "precision: Ascend 910C: no published dense fp8 peak; published precisions: bf16, int8"),
    (["deployment.precision.kv=int8"], "deployment.precision.kv: expected one of bf16, fp8"),
    (["device=modeled:Ascend 950DT", "deployment.devices=8",
      "deployment.precision.attention=bf16"],
     "deployment.precision.attention: Ascend 950DT has no published dense bf16 peak; "
     "published: fp8, fp4"),
    (["device=modeled:Ascend 910C", "precision=int8", "deployment.devices=512",
      "deployment.moe.ep=256", "deployment.moe.tp=2"],
     "deployment.devices: 512 devices span more than one scale-up domain of 384, and Ascend "
     "910C has no published scale-out bandwidth"),
    (["deployment.devices=8", "engine.dp_size=4"],
     "engine.dp_size: the deployment's attention.dp is 8, got dp_size 4: leave dp_size out"),
    (["deployment.micro_batches=3"], "deployment.micro_batches: expected one of 1, 2, got 3"),
    (["deployment.expert_imbalance=0.9"],
     "deployment.expert_imbalance: expected a finite number >= 1, got 0.9"),
    (["deployment.precision.kv=fp4"], "deployment.precision.kv: expected one of bf16, fp8"),
    # a real device runs a deployment as processes (tests/test_ranks_input.py), EP over them
    (["device=cpu", "deployment.devices=3"], "deployment.moe.ep: must divide"),
])
def test_what_no_engine_could_run_is_refused_by_key(tmp_path, overrides, message):
    assert message in refused(tmp_path, *overrides)


def test_a_torch_device_leaves_auto_to_its_executor(tmp_path):
    """Sized once the model is on the device (tests/test_kv_pool.py), at the deployment's
    memory_utilization, the one deployment key a torch device takes; a given pool is
    checked there against the same share."""
    w = load(tmp_path, "device=cpu", "model=tiny", "deployment.memory_utilization=0.5")
    assert w.values["engine"]["num_kv_blocks"] == "auto"
    config = w.engine_config("released")
    assert (config.scheduler.num_kv_blocks, config.memory_utilization,
            config.size_kv_blocks) == (4096, 0.5, True)
    given = load(tmp_path, "device=cpu", "model=tiny", "engine.num_kv_blocks=64")
    config = given.engine_config("released")
    assert (config.scheduler.num_kv_blocks, config.memory_utilization,
            config.size_kv_blocks) == (64, 0.9, False)


def test_achieved_tflops_are_per_chip_of_the_deployment(tmp_path):
    """One DP rank on a TP8 group: its FLOPs spread over 8 chips, so MFU stays below 1."""
    from harness.sweeps.sweep import run_workload

    (run,) = run_workload(load(tmp_path, *EP8, "deployment.attention.tp=8",
                               "trace.generate.requests=32", "trace.generate.rate=1000"))
    run_dir = run.path
    steps = pd.read_parquet(run_dir / "steps.parquet", columns=["step", "model_flops",
                                                                "forward_ns"])
    summary = pd.read_parquet(run_dir / "summary.parquet").set_index(["metric", "stat"])
    forward_s = steps.groupby("step")["forward_ns"].first().sum() / 1e9
    achieved = summary.loc[("achieved", "tflops_per_device"), "value"]
    assert achieved == pytest.approx(steps["model_flops"].sum() / forward_s / 8 / 1e12)
    assert 0 < summary.loc[("mfu", "model"), "value"] < 1


def test_the_steps_table_and_summary_say_how_long_ranks_wait_for_the_slowest(tmp_path):
    """docs/metrics.md, "DP imbalance": per step max(rank_s) / mean(rank_s) over all its
    ranks, idle ones without a row included (tests/test_sparse_ranks.py holds the
    aggregates to every rank's costs), and over the run the share of rank-time lost
    waiting, from the recorded aggregates by hand."""
    from harness.sweeps.sweep import run_workload
    from tests.helpers import MODELED
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path}\n" + MODELED.replace(
        "deployment: {devices: 8, attention: {tp: 8}, dense: {tp: 8}, stack: roofline}",
        "deployment: {devices: 8, attention: {dp: 8}, moe: {ep: 8}}"))
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    steps = pd.read_parquet(run_dir / "steps.parquet")
    by_step = steps.groupby("step")
    slowest, mean = by_step["slowest_rank_s"].first(), by_step["mean_rank_s"].first()
    assert (by_step["rank_s"].max() == slowest).all()  # the slowest rank has a row
    assert (by_step["rank_s"].sum() <= mean * 8 * (1 + 1e-12)).all()
    assert by_step["dp_imbalance"].first().tolist() == pytest.approx(
        (slowest / mean).tolist(), rel=1e-12)
    assert (steps["rank_s"] > 0).all()  # an idle rank still waits in the all-to-alls
    assert (slowest / mean).max() > 1.05  # some step is lopsided
    summary = pd.read_parquet(run_dir / "summary.parquet").set_index(["metric", "stat"])
    value = summary["value"]
    assert value["dp_imbalance", "lost_share"] == pytest.approx(1 - mean.sum() / slowest.sum())
    assert value["dp_imbalance", "max"] == pytest.approx((slowest / mean).max())
