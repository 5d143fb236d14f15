"""A real trace through a whole `steptrace run`: the Azure 2023 code trace (8,819 requests)
on its modeled 8 x H200 deployment (workloads/azure_code_h200.yaml), the console script
as a user runs it, start-up, replay, tables and exit. Target: under 3 s of CPU for the
process and its children (the table writer's), on the 2-core development host.

Run: python -m pytest tests/bench/test_trace_replay_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) it replays the trace's first 500 requests.
"""

import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPTRACE = Path(sys.executable).parent / "steptrace"
TARGET_CPU_S = 3.0


@pytest.mark.slow
def test_azure_code_trace_on_8_h200s(benchmark, tmp_path):
    enabled = not benchmark.disabled
    short = [] if enabled else ["--set", "trace.limit=500"]
    cpu, wall = [], []

    def run():
        out = tmp_path / str(len(wall))
        before = _children_cpu()
        start = time.perf_counter()
        done = subprocess.run([str(STEPTRACE), "run", "workloads/azure_code_h200.yaml",
                               "--set", f"output={out}", *short],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        wall.append(time.perf_counter() - start)
        cpu.append(_children_cpu() - before)
        assert done.returncode == 0, done.stderr

    benchmark.pedantic(run, rounds=3 if enabled else 1, iterations=1)
    steps = pd.read_parquet(next(tmp_path.glob("0/*/*/steps.parquet")), columns=["step"])
    requests = pd.read_parquet(next(tmp_path.glob("0/*/*/requests.parquet")),
                               columns=["status"])
    print(f"\n{len(requests)} requests, {steps['step'].nunique()} steps: CPU {cpu} s, "
          f"wall {[round(w, 2) for w in wall]} s")
    benchmark.extra_info.update(cpu_s=cpu, wall_s=wall, steps=int(steps["step"].nunique()))
    assert (requests["status"] == "finished").all()
    if enabled:
        assert len(requests) == 8_819
        assert float(np.median(cpu)) < TARGET_CPU_S


def _children_cpu() -> float:
    """User and system CPU of the children waited for so far (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(usage.ru_utime + usage.ru_stime, 2)
