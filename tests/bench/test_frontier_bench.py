"""A device's front, end to end (docs/frontier.md): DeepSeek-R1 at 1k/1k on a modeled B200
(workloads/fronts/r1_1k1k.yaml), its deployments generated, estimated and pruned to
`keep`, each survivor's ladder run, the fronts read; with one and with two workers of this
host's pool, each `steptrace sweep` in its own process. Targets: with benchmarks enabled,
30 deployments and at least 6 rungs each in under 10 minutes on two workers, and two
workers at least 1.6x one (each ladder climbs while the others run).

Run: python -m pytest tests/bench/test_frontier_bench.py -m slow --benchmark-enable -s
In the slow tier (benchmarks disabled) it runs a front of 2 deployments, as a smoke test.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.slow  # runs whole searches

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "workloads" / "fronts" / "r1_1k1k.yaml"
TARGET_S, SCALING = 600.0, 1.6
SM100 = {"attention": "bf16", "dense": "fp4", "experts": "fp4", "kv": "fp8",
         "dispatch": "fp4", "combine": "bf16"}


def front(tmp_path: Path, workers: int, keep: int, sets=()):
    """(seconds, the search's frontier_points) of one B200 front on `workers` workers."""
    path = tmp_path / f"b200-{workers}.yaml"
    path.write_text(yaml.safe_dump({
        "name": f"b200-{workers}", "base": str(BASE),
        "axes": {"device": ["modeled:B200"], "deployment.precision": [SM100],
                 "deployment.micro_batches": [1]},
        "zip": [["device", "deployment.precision", "deployment.micro_batches"]],
        "search": {"method": "frontier", "mtp": [0, 1, 3], "keep": keep}}))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "harness.commands", "sweep", str(path), "--workers",
         str(workers), "--set", f"output={tmp_path / 'out'}", "--json", *sets],
        capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(json.loads(done.stdout)["folder"])
    return seconds, pd.read_parquet(folder / "frontier_points.parquet")


def test_a_devices_front_in_minutes_and_two_workers_faster(benchmark, tmp_path):
    keep, sets = (30, ()) if not benchmark.disabled else \
        (2, ("--set", "engine.max_num_seqs=8"))
    (one, points), (two, again) = benchmark.pedantic(
        lambda: (front(tmp_path, 1, keep, sets), front(tmp_path, 2, keep, sets)),
        rounds=1, iterations=1)
    deployments, rungs = points["deployment"].nunique(), len(points)
    print(f"\nB200 front: {deployments} deployments, {rungs} rungs "
          f"({rungs / deployments:.1f} a deployment); one worker {one:.0f} s, two "
          f"{two:.0f} s ({one / two:.2f}x)")
    benchmark.extra_info.update(deployments=deployments, rungs=rungs, one_worker_s=one,
                                two_workers_s=two)
    assert points.drop(columns="point").equals(again.drop(columns="point"))
    if not benchmark.disabled:
        assert deployments >= 30 and rungs >= 6 * deployments
        assert two <= TARGET_S and one / two >= SCALING
