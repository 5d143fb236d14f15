"""A deployment on a real device: what the engine processes cannot run, or this host cannot
start, refused by key before anything runs (exit 2, nothing written)."""

import importlib.util
import os

import pytest
import torch

from harness.commands import main
from harness.workload import WorkloadError, load_workload
from harness.workload.real_deployment import CPU_RANKS_PER_CORE

BASE = "trace: {generate: {requests: 2}}\nmodel: tiny\ntelemetry: {enabled: false}\n"


def refused(tmp_path, body):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + body)
    with pytest.raises(WorkloadError) as e:
        load_workload(path)
    return str(e.value)


def test_a_deployment_of_two_cpu_ranks_loads(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "device: cpu\ndeployment: {devices: 2, moe: {ep: 1}}\n")
    w = load_workload(path)
    assert w.ranks == 2 and w.values["frontend"]["mode"] == "inline"


def test_expert_parallelism_over_every_rank_loads(tmp_path):
    # moe.ep's default is devices / moe.tp: 2 here, the tiny model's 8 experts over 2 ranks
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "device: cpu\ndeployment: {devices: 2, micro_batches: 2}\n")
    assert load_workload(path).values["deployment"]["micro_batches"] == 2


def test_ep_over_some_ranks_is_refused(tmp_path):
    message = refused(tmp_path, "device: cpu\ndeployment: {devices: 4, moe: {ep: 2}}\n")
    assert "deployment.moe.ep: the real engine runs EP over all its 4 ranks; expected 1 or 4" \
        in message


def test_two_micro_batches_without_ep_are_refused(tmp_path):
    message = refused(tmp_path, "device: cpu\ndeployment: {devices: 2, moe: {ep: 1}, "
                                "micro_batches: 2}\n")
    assert "deployment.micro_batches: two micro-batches overlap one's all-to-all" in message


def test_more_cpu_ranks_than_the_cores_allow(tmp_path):
    cores = os.cpu_count()
    n = cores * CPU_RANKS_PER_CORE + 1
    message = refused(tmp_path, f"device: cpu\ndeployment: {{devices: {n}, moe: {{ep: 1}}}}\n")
    assert f"deployment.devices: {n} rank processes on a host of {cores} cores: expected at " \
           f"most {n - 1}" in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA")
def test_nccl_without_cuda(tmp_path):
    message = refused(tmp_path, "device: cuda\ndeployment: {devices: 2, moe: {ep: 1}}\n")
    assert "deployment.devices: 2 devices on cuda need NCCL, and this torch build has no " \
           "CUDA" in message


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None,
                    reason="torch_npu is installed")
def test_hccl_without_torch_npu(tmp_path):
    message = refused(tmp_path, "device: npu\ndeployment: {devices: 2, moe: {ep: 1}}\n")
    assert "deployment.devices: 2 devices on npu need HCCL, and torch_npu is not installed" \
           in message


@pytest.mark.parametrize("body, where", [
    ("deployment: {devices: 2, attention: {dp: 1}, moe: {ep: 1}}\n",
     "deployment.attention.dp: on a real device every device is a DP attention rank"),
    ("deployment: {devices: 2, attention: {tp: 2}, moe: {ep: 1}}\n",
     "deployment.attention.tp: TP on the real engine is not built yet"),
    ("deployment: {devices: 2, moe: {ep: 1}, expert_imbalance: 1.0}\n",
     "deployment.expert_imbalance: modeled devices only"),
    ("deployment: {micro_batches: 2}\n",
     "deployment.micro_batches: two micro-batches overlap one's all-to-all"),
    ("deployment: {devices: 2, moe: {ep: 1}}\nclock: virtual\n",
     "clock: rank processes step on the real clock"),
    ("deployment: {devices: 2, moe: {ep: 1}}\nload: {mode: concurrency, concurrency: 2}\n",
     "load.mode: a closed loop over rank processes is not built yet"),
    ("deployment: {devices: 2, moe: {ep: 1}}\nengine: {dp_size: 2}\n",
     "engine.dp_size: with deployment.devices > 1 each device is a process"),
])
def test_what_the_real_engine_does_not_run_is_refused_by_key(tmp_path, body, where):
    assert where in refused(tmp_path, "device: cpu\n" + body)


def test_the_command_exits_2_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + f"output: {tmp_path / 'out'}\ndevice: cpu\n"
                    f"deployment: {{devices: 4, moe: {{ep: 2}}}}\n")
    assert main(["run", str(path)]) == 2
    assert "deployment.moe.ep: the real engine runs EP over all its 4 ranks" \
        in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_rank_process_engine_has_its_pool_as_the_rank_sized_it():
    """`num_kv_blocks: auto` is sized in the rank on its device: the harness's view of the
    engine (the manifest's pools, the P/D routers' free blocks) takes that size."""
    from engine.config import EngineConfig
    from harness.ranks.processes import RankedEngine

    sized = RankedEngine(EngineConfig(model="tiny", device="cpu"),
                         {"num_kv_blocks": 77, "sized": "device memory"})
    assert sized.config.scheduler.num_kv_blocks == 77
    assert sized.kv_pool.manifest()["sized"] == "device memory"


@pytest.mark.parametrize("timeout", ["1e-9", "0.5", "86401", "1e308"])
def test_a_collective_timeout_out_of_its_range_is_refused(tmp_path, timeout):
    """1e-9 s used to end in a 20-line c10d stack from the ranks, 1e308 in the bug line."""
    message = refused(tmp_path, f"device: cpu\ndeployment: {{devices: 2, moe: {{ep: 1}}}}\n"
                                f"collective_timeout_s: {timeout}\n")
    assert "w.yaml:6: collective_timeout_s: expected a finite number in 1.0..86400.0, got " \
        in message


@pytest.mark.parametrize("variable, value, words", [
    ("MASTER_PORT", "abc", "MASTER_PORT is 'abc': expected a port number in 1..65535"),
    ("MASTER_PORT", "99999", "MASTER_PORT is '99999': expected a port number in 1..65535"),
    ("MASTER_PORT", "0", "MASTER_PORT is '0'"),
    ("MASTER_PORT", "-1", "MASTER_PORT is '-1'"),
    ("MASTER_ADDR", "", "MASTER_ADDR is empty"),
])
def test_a_rendezvous_torch_cannot_use_is_named_before_any_rank_starts(
        tmp_path, monkeypatch, capsys, variable, value, words):
    monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "device: cpu\ndeployment: {devices: 2, moe: {ep: 1}}\n")
    assert main(["run", str(path)]) == 2  # validation, before any rank process
    (err,) = capsys.readouterr().err.splitlines()
    assert "w.yaml:5: deployment.devices: 2 rank processes meet at MASTER_ADDR:MASTER_PORT" \
        in err and words in err
    assert not (tmp_path / "results").exists()


def test_an_empty_master_port_is_a_free_port(tmp_path, monkeypatch):
    monkeypatch.setenv("MASTER_PORT", "")
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "device: cpu\ndeployment: {devices: 2, moe: {ep: 1}}\n"
                    "collective_timeout_s: 1\n")
    assert load_workload(path).ranks == 2
