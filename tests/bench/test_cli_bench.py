"""The first minute: `steptrace --version` and `steptrace --help` in a fresh interpreter each,
the console script as a user runs it. Target: under 0.3 s on the 2-core development host
(the median of 10; before the commands' modules were imported on demand: 0.78 s).

Run: python -m pytest tests/bench/test_cli_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) each runs once, as a smoke test.
"""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

STEPTRACE = Path(sys.executable).parent / "steptrace"
TARGET_S = 0.3


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_start_quickly(benchmark, flag):
    enabled = not benchmark.disabled
    times = []

    def once():
        start = time.perf_counter()
        done = subprocess.run([str(STEPTRACE), flag], capture_output=True, text=True,
                              timeout=60)
        times.append(time.perf_counter() - start)
        assert done.returncode == 0 and "steptrace" in done.stdout, done.stderr
    benchmark.pedantic(once, rounds=10 if enabled else 1, iterations=1)
    median = float(np.median(times))
    print(f"\nsteptrace {flag}: median {median:.3f} s over {len(times)} runs")
    benchmark.extra_info.update(median_s=median)
    if enabled:
        assert median < TARGET_S
