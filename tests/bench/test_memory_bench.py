"""Memory bounded by what is live: peak RSS of a 1,000,000-request modeled replay against a
100,000-request one (workloads/bench_million.yaml), each `steptrace run` in its own process.

Run: python -m pytest tests/bench/test_memory_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) it replays 2,000 and 20,000 requests.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "workloads" / "bench_million.yaml"


def peak_rss_mb(requests: int, output: Path) -> float:
    """Peak resident set of one `steptrace run` process replaying `requests` requests."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.commands", "run", str(WORKLOAD),
         "--set", f"trace.generate.requests={requests}", "--set", f"output={output}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, stderr[-2000:]
    return usage.ru_maxrss / 1024  # kB on Linux


def test_peak_rss_does_not_grow_with_requests(benchmark, tmp_path):
    small, large = (100_000, 1_000_000) if not benchmark.disabled else (2_000, 20_000)
    rss = benchmark.pedantic(lambda: (peak_rss_mb(small, tmp_path), peak_rss_mb(large, tmp_path)),
                             rounds=1, iterations=1)
    ratio = rss[1] / rss[0]
    print(f"\npeak RSS: {small:,} requests {rss[0]:.0f} MB, {large:,} requests "
          f"{rss[1]:.0f} MB ({ratio:.2f}x)")
    benchmark.extra_info.update(small_mb=rss[0], large_mb=rss[1], ratio=ratio)
    if not benchmark.disabled:
        assert ratio <= 1.3
