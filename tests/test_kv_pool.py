"""`num_kv_blocks: auto` on a real accelerator: the pool is what device memory leaves with
the model resident (engine/kv_pool.py). On this CPU-only host torch.cuda's memory queries
are replaced by a fake reporting fixed numbers, so the CUDA path runs without a GPU."""

import json

import pytest
import torch

from engine import LLMEngine, SchedulerConfig, kv_pool
from engine.config import EngineConfig
from engine.device_memory import DoesNotFit
from harness.commands import main

pytestmark = pytest.mark.core

GB = 1e9
# tiny at float32: 3 cache layers (2 + MTP) x 16 tokens x (32 + 8) latent x 4 bytes
TINY_BLOCK_BYTES = 3 * 16 * 40 * 4


class FakeCudaMemory:
    """Fixed numbers: `free` of `total` bytes free; `baseline` allocated, and a peak of
    baseline + `activations` once the peak was reset."""

    def __init__(self, total, free, activations, baseline=5e6):
        self.total, self.free, self.activations = total, free, activations
        self.baseline = baseline
        self.peak = None

    def install(self, monkeypatch):
        for name in ("mem_get_info", "memory_allocated", "max_memory_allocated",
                     "reset_peak_memory_stats", "synchronize", "empty_cache"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        # the device is this host's CPU; its memory is answered by (the fake) torch.cuda
        monkeypatch.setattr(kv_pool, "memory_queries", lambda device: torch.cuda)

    def mem_get_info(self, device=None):
        return int(self.free), int(self.total)

    def memory_allocated(self, device=None):
        return int(self.baseline)

    def reset_peak_memory_stats(self, device=None):
        self.peak = self.baseline + self.activations

    def max_memory_allocated(self, device=None):
        assert self.peak is not None, "the peak is read without being reset first"
        return int(self.peak)

    def synchronize(self, device=None):
        pass

    def empty_cache(self):
        pass


def tiny(dp_size=1, memory_utilization=0.5, size_kv_blocks=True, **sched):
    return EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=64, dp_size=dp_size,
                                                  **sched),
                        model="tiny", device="cpu", memory_utilization=memory_utilization,
                        size_kv_blocks=size_kv_blocks)


def test_the_accounting_is_hand_arithmetic():
    # 80 GB x 0.9 = 72 GB; 20 GB in use, 4 GB of activations: 48 GB of 1 MB blocks
    assert kv_pool.blocks_from_memory(80 * GB, 20 * GB, 4 * GB, 0.9, 1e6) == 48_000
    assert kv_pool.blocks_from_memory(80 * GB, 20 * GB, 4 * GB, 0.9, 1e6, ranks=2) == 24_000
    assert kv_pool.blocks_from_memory(80 * GB, 20 * GB, 4 * GB, 0.9, 3e6) == 16_000
    assert kv_pool.blocks_from_memory(80 * GB, 20 * GB, 4 * GB, 0.9, 7e6) == 6_857  # rounded down
    assert kv_pool.blocks_from_memory(80 * GB, 70 * GB, 4 * GB, 0.9, 1e6) == 0  # nothing left


def test_cuda_and_npu_are_asked_a_cpu_is_not():
    assert kv_pool.memory_queries(torch.device("cuda")) is torch.cuda
    assert kv_pool.memory_queries(torch.device("cpu")) is None


@pytest.mark.parametrize("dp_size", [1, 2])
def test_the_engine_sizes_its_pool_from_cuda_memory(monkeypatch, dp_size):
    """1 GB device, 0.2 GB in use after the weights, 0.1 GB of activations, utilization 0.5:
    0.2 GB for KV, shared by the DP ranks on the device."""
    FakeCudaMemory(total=1 * GB, free=0.8 * GB, activations=0.1 * GB).install(monkeypatch)
    engine = LLMEngine(tiny(dp_size))
    expected = int(0.2 * GB / dp_size // TINY_BLOCK_BYTES)  # 26,041 blocks; 13,020 each
    assert engine.scheduler.num_free_blocks(0) == expected
    assert [w.kv_cache.shape[1] for w in engine.executor.workers] == [expected] * dp_size
    assert engine.kv_pool.manifest() == dict(
        num_kv_blocks=expected, sized="device memory", total_bytes=int(GB),
        memory_utilization=0.5, used_bytes=int(0.2 * GB), reserve_bytes=int(0.1 * GB),
        bytes_per_block=TINY_BLOCK_BYTES, ranks=dp_size, fit_blocks=expected)
    for i in range(3):  # and it serves from that pool
        engine.add_request(i, prompt_len=40, max_new_tokens=3)
    assert sum(len(r.finished) for r in engine.run()) == 3


def test_a_large_device_is_capped_at_what_the_sequences_can_use(monkeypatch):
    FakeCudaMemory(total=141 * GB, free=140 * GB, activations=1 * GB).install(monkeypatch)
    engine = LLMEngine(tiny(max_num_seqs=8))
    assert engine.kv_pool.num_kv_blocks == 8 * 4096 // 16  # 8 sequences of 4,096 tokens
    assert engine.kv_pool.fit_blocks > engine.kv_pool.num_kv_blocks


def test_weights_that_leave_no_room_for_one_sequence_are_refused(monkeypatch):
    """0.3 GB free of 1 GB at utilization 0.75 with 0.05 GB of activations: 0 bytes left."""
    FakeCudaMemory(total=1 * GB, free=0.3 * GB, activations=0.05 * GB).install(monkeypatch)
    with pytest.raises(DoesNotFit) as e:
        LLMEngine(tiny(memory_utilization=0.75))
    assert str(e.value) == (
        "tiny (float32) on cpu: 1.00 GB x memory_utilization 0.75 = 0.75 GB; 0.70 GB in use "
        "with the weights resident and 0.05 GB of activations (a 64-token forward) leave "
        "0.00 GB: 0 KV blocks of 16 tokens (7,680 bytes each) per DP rank (1 on the device), "
        "< 256 for one sequence of max_position_embeddings 4096 tokens")


def test_a_configured_pool_is_checked_against_device_memory(monkeypatch):
    """The first test's device: room for 26,041 blocks; 26,041 are taken, 26,042 refused
    before any cache is allocated."""
    FakeCudaMemory(total=1 * GB, free=0.8 * GB, activations=0.1 * GB).install(monkeypatch)
    engine = LLMEngine(tiny(num_kv_blocks=26_041, size_kv_blocks=False))
    assert engine.executor.workers[0].kv_cache.shape[1] == 26_041
    assert engine.kv_pool.manifest() == dict(
        num_kv_blocks=26_041, sized="configured", total_bytes=int(GB), memory_utilization=0.5,
        used_bytes=int(0.2 * GB), reserve_bytes=int(0.1 * GB),
        bytes_per_block=TINY_BLOCK_BYTES, ranks=1, fit_blocks=26_041)
    with pytest.raises(DoesNotFit) as e:
        LLMEngine(tiny(num_kv_blocks=26_042, size_kv_blocks=False))
    assert str(e.value) == (
        "tiny (float32) on cpu: 1.00 GB x memory_utilization 0.5 = 0.50 GB; 0.20 GB in use "
        "with the weights resident and 0.10 GB of activations (a 64-token forward) leave "
        "0.20 GB: 26041 KV blocks of 16 tokens (7,680 bytes each) per DP rank (1 on the "
        "device), < the 26042 configured")


def test_a_cpu_keeps_the_configured_pool():
    engine = LLMEngine(tiny(num_kv_blocks=96))
    assert engine.kv_pool == kv_pool.KVPool(96, "configured", kv_pool.CPU_NOTE)
    assert engine.executor.workers[0].kv_cache.shape[1] == 96
    for given in (LLMEngine(tiny(memory_utilization=None, num_kv_blocks=96)),
                  LLMEngine(tiny(num_kv_blocks=96, size_kv_blocks=False))):
        assert given.kv_pool.manifest() == dict(num_kv_blocks=96, sized="configured")


WORKLOAD = """trace:
  generate: {requests: 2, rate: 100, prompt: {fixed: 8}, output: {fixed: 2}}
model: tiny
device: cpu
engine: {max_num_batched_tokens: 64}
calibration_requests: 0
telemetry: {enabled: false}
"""


def test_the_manifest_says_how_the_pool_was_sized(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD)
    assert main(["run", str(path), "--set", f"output={tmp_path / 'out'}"]) == 0
    (manifest,) = (tmp_path / "out" / "w").glob("*/manifest.json")
    pool = json.loads(manifest.read_text())["kv_pool"]
    assert pool == dict(num_kv_blocks=4096, sized="configured", note=kv_pool.CPU_NOTE)


def test_the_refusal_exits_2_with_nothing_written(tmp_path, monkeypatch, capsys):
    FakeCudaMemory(total=1 * GB, free=0.1 * GB, activations=0.05 * GB).install(monkeypatch)
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD)
    assert main(["run", str(path), "--set", f"output={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: engine.num_kv_blocks: tiny (float32) on cpu: 1.00 GB x " in err
    assert "< 256 for one sequence of max_position_embeddings 4096 tokens" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_configured_pool_too_large_exits_2_with_nothing_written(tmp_path, monkeypatch,
                                                                  capsys):
    """1 GB x 0.9 with 0.2 GB in use and 0.05 GB of activations: 84,635 blocks fit."""
    FakeCudaMemory(total=1 * GB, free=0.8 * GB, activations=0.05 * GB).install(monkeypatch)
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD)
    out = ["--set", f"output={tmp_path / 'out'}"]
    assert main(["run", str(path), *out, "--set", "engine.num_kv_blocks=100000"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: engine.num_kv_blocks: tiny (float32) on cpu: 1.00 GB x " in err
    assert "84635 KV blocks of 16 tokens (7,680 bytes each) per DP rank (1 on the device), " \
           "< the 100000 configured" in err
    assert not (tmp_path / "out").exists()
    assert main(["run", str(path), *out, "--set", "engine.num_kv_blocks=84635"]) == 0
