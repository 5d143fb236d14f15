"""The harness's own costs: the recorder per step, and a one-hour modeled replay.

Run: python -m pytest tests/bench/test_harness_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) each case runs once, on a short trace.
"""

import time
from pathlib import Path

import pandas as pd

from engine import EngineConfig, LLMEngine, SchedulerConfig
from harness.recorder import Recorder
from harness.run import run_workload
from harness.table_sink import TableSink
from harness.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
ROWS = 64


def decoding_engine(model, executor="torch"):
    """A tiny-model engine with ROWS requests prefilled and decoding."""
    engine = LLMEngine(EngineConfig(
        model=model, executor=executor, device="cpu",
        scheduler=SchedulerConfig(max_num_seqs=ROWS, num_kv_blocks=ROWS * 8, block_size=16)))
    for i in range(ROWS):
        engine.add_request(i, prompt_len=16, max_new_tokens=64)
    engine.step()  # the prefill
    return engine


def test_recorder_cost_per_step(benchmark, tmp_path):
    """Recorder.step on a 64-row decode step (the hot path: rows into the C++ columns),
    then the chunk's write to Parquet per step, against the tiny model's decode step on
    the CPU measured in the same run."""
    enabled = not benchmark.disabled
    engine = decoding_engine("tiny")
    record = engine.step()
    forward_s = min(_timed(engine.step) for _ in range(5 if enabled else 1))
    recorder = Recorder(engine, 0, TableSink(tmp_path, "steps", "parquet", dict(run_id="b")),
                        TableSink(tmp_path, "batches", "parquet", dict(run_id="b")))
    steps = recorder.chunk_steps - 1  # a round never reaches a flush: setup() flushes
    clock = iter(range(10**9))

    def record_steps():
        for _ in range(steps):
            t = next(clock) * 1e-3
            recorder.step(record, t, t + 1e-3)

    benchmark.pedantic(record_steps, setup=recorder.flush, rounds=100 if enabled else 1,
                       iterations=1, warmup_rounds=1 if enabled else 0)
    record_s = benchmark.stats.stats.min / steps if enabled else float("nan")
    write_s = _timed(recorder.flush) / steps
    print(f"\nrecorder {record_s * 1e6:.2f} us/step + write {write_s * 1e6:.2f} us/step;"
          f" tiny-model step {forward_s * 1e3:.2f} ms; share {(record_s + write_s) / forward_s:.4%}")
    benchmark.extra_info.update(record_us=record_s * 1e6, write_us=write_s * 1e6,
                                tiny_step_ms=forward_s * 1e3)
    recorder.close()
    assert len(pd.read_parquet(tmp_path / "batches.parquet")) >= steps * ROWS


def test_one_hour_modeled_replay(benchmark, tmp_path):
    """workloads/bench_hour.yaml end to end: ~280,000 steps, all tables written."""
    enabled = not benchmark.disabled
    overrides = [f"output={tmp_path}"] + ([] if enabled else ["trace.generate.requests=200"])
    workload = load_workload(ROOT / "workloads" / "bench_hour.yaml", overrides)
    started = time.perf_counter()
    (run_dir,) = benchmark.pedantic(run_workload, args=(workload,), rounds=1, iterations=1)
    seconds = time.perf_counter() - started
    steps = len(pd.read_parquet(run_dir / "steps.parquet", columns=["step"]))
    requests = pd.read_parquet(run_dir / "requests.parquet", columns=["status"])
    benchmark.extra_info.update(steps=steps, seconds=seconds, us_per_step=seconds / steps * 1e6)
    print(f"\n{steps} steps in {seconds:.2f} s ({seconds / steps * 1e6:.1f} us/step)")
    assert (requests["status"] == "finished").all()
    if enabled:
        assert 250_000 <= steps <= 320_000


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
