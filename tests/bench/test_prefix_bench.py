"""The one-hour modeled replay (workloads/bench_hour.yaml) with hash ids on every request,
against the same trace without them: prefix caching's cost to the harness.

Run: python -m pytest tests/bench/test_prefix_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) each arm runs once, on 50 requests.
"""

import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.sweeps.sweep import run_workload
from harness.traces.write import write_tidy
from harness.workload import load_workload
from harness.workload.trace import load_workload_trace

ROOT = Path(__file__).resolve().parents[2]
HASH_BLOCK = 64  # the workload's block_size: one hash id per engine block
FAMILIES = 16  # shared system prompts
SHARED_BLOCKS = 4  # blocks of a family's prompt every member starts with


def with_hash_ids(df):
    """A hash id per 64-token block of every prompt: a request starts with its family's
    shared blocks (up to all but its last), then ids of its own."""
    fresh = iter(range(10**6, 10**12))
    ids = []
    for i, prompt_len in enumerate(df["prompt_len"].tolist()):
        blocks = -(-prompt_len // HASH_BLOCK)
        shared = min(SHARED_BLOCKS, blocks - 1)
        family = (i % FAMILIES) * 1000
        ids.append([family + j for j in range(shared)]
                   + [next(fresh) for _ in range(blocks - shared)])
    return df.assign(hash_ids=ids)


def hour_workloads(tmp_path, requests):
    """(without hash ids, with them): bench_hour.yaml's trace generated once, then replayed
    from a tidy Parquet file, with and without a hash_ids column."""
    spec = yaml.safe_load((ROOT / "workloads" / "bench_hour.yaml").read_text())
    spec["trace"]["generate"]["requests"] = requests
    df = load_workload_trace(load_workload(_write(tmp_path / "gen.yaml", spec))).df
    out = []
    for name, trace in (("plain", df), ("hashed", with_hash_ids(df))):
        path = tmp_path / f"{name}.parquet"
        write_tidy(trace, path, hash_block_size=HASH_BLOCK if name == "hashed" else None)
        run = dict(spec, name=name, trace={"file": str(path)}, output=str(tmp_path / "runs"))
        out.append(load_workload(_write(tmp_path / f"{name}.yaml", run)))
    return out


def _write(path, spec):
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_hour_replay_with_hash_ids_within_1_2x(benchmark, tmp_path):
    enabled = not benchmark.disabled
    plain, hashed = hour_workloads(tmp_path, 20000 if enabled else 50)
    seconds = {"plain": [], "hashed": []}
    steps, hits = {}, {}
    for _ in range(3 if enabled else 1):  # alternated, so both see the same host
        for name, workload in (("plain", plain), ("hashed", hashed)):
            started = time.perf_counter()
            (run,) = run_workload(workload)
            run_dir = run.path
            seconds[name].append(time.perf_counter() - started)
            table = pd.read_parquet(run_dir / "steps.parquet",
                                    columns=["step", "prefix_hit_tokens"])
            steps[name], hits[name] = len(table), int(table["prefix_hit_tokens"].sum())
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    best = {name: min(s) for name, s in seconds.items()}
    ratio = best["hashed"] / best["plain"]
    benchmark.extra_info.update(plain_s=seconds["plain"], hashed_s=seconds["hashed"],
                                ratio=ratio, steps=steps, hit_tokens=hits)
    print(f"\nwithout hash ids {seconds['plain']} s ({steps['plain']} steps), with "
          f"{seconds['hashed']} s ({steps['hashed']} steps, {hits['hashed']} hit tokens): "
          f"best {best['hashed']:.2f} / {best['plain']:.2f} = {ratio:.3f}x")
    assert hits["plain"] == 0 and hits["hashed"] > 0
    if enabled:
        assert ratio <= 1.2
