"""Memory bounded by what is live: peak RSS of a 1,000,000-request modeled replay against a
100,000-request one (workloads/bench_million.yaml), each `steptrace run` in its own process:
the harness's process (from wait4), and the whole tree (the harness and its table writer,
their resident sets summed, sampled every 10 ms). And what grows with the run, in bytes per
request and per step: what the recorder keeps for the summary's exact answers.

Run: python -m pytest tests/bench/test_memory_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) it replays 2,000 and 20,000 requests.
"""

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import psutil
import pytest

from harness.record.recorder import Recorder
from harness.replay.loop import NativeLoop, PythonLoop
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "workloads" / "bench_million.yaml"


def peak_rss_mb(requests: int, output: Path):
    """(the harness process's peak RSS, the process tree's) of one `steptrace run`
    replaying `requests` requests, in MB."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.commands", "run", str(WORKLOAD),
         "--set", f"trace.generate.requests={requests}", "--set", f"output={output}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    tree = psutil.Process(process.pid)
    peak = 0
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        try:
            peak = max(peak, sum(p.memory_info().rss
                                 for p in [tree, *tree.children(recursive=True)]))
        except psutil.Error:  # a process ended between the listing and the reading
            pass
        time.sleep(0.01)
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, stderr[-2000:]
    return usage.ru_maxrss / 1024, peak / 2**20  # ru_maxrss: kB on Linux


def test_peak_rss_does_not_grow_with_requests(benchmark, tmp_path):
    small, large = (100_000, 1_000_000) if not benchmark.disabled else (2_000, 20_000)
    (process_small, tree_small), (process_large, tree_large) = benchmark.pedantic(
        lambda: (peak_rss_mb(small, tmp_path), peak_rss_mb(large, tmp_path)),
        rounds=1, iterations=1)
    process, tree = process_large / process_small, tree_large / tree_small
    print(f"\npeak RSS, harness process: {small:,} requests {process_small:.0f} MB, "
          f"{large:,} requests {process_large:.0f} MB ({process:.2f}x); with the table "
          f"writer: {tree_small:.0f} MB, {tree_large:.0f} MB ({tree:.2f}x)")
    benchmark.extra_info.update(small_mb=process_small, large_mb=process_large, ratio=process,
                                tree_small_mb=tree_small, tree_large_mb=tree_large,
                                tree_ratio=tree)
    if not benchmark.disabled:
        assert process <= 1.3 and tree <= 1.3


def recorder_memory(benchmark, monkeypatch, workload) -> dict:
    """The workload replayed in this process under tracemalloc, timed once by `benchmark`:
    what its recorder keeps at its close (`request_bytes` and `step_bytes`, by
    Recorder.retained_bytes; its `steps` and trace `rows`), and what Python allocated from
    the recorder's start and still holds at its close (`traced`) or held at most before it
    (`peak`), in bytes."""
    kept: dict = {}

    class Measured(Recorder):
        def __init__(self, *args, **kwargs) -> None:
            kept["start"] = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            super().__init__(*args, **kwargs)

        def close(self) -> None:
            super().close()
            kept["traced"], kept["peak"] = (m - kept["start"]
                                            for m in tracemalloc.get_traced_memory())
            kept["request_bytes"], kept["step_bytes"] = self.retained_bytes()
            kept["steps"] = sum(s.steps for s in self.step_summaries.values())
            kept["rows"] = len(self.max_new_tokens)

    for loop in (PythonLoop, NativeLoop):  # the workload's, whichever it replays by
        monkeypatch.setattr(loop, "recorder_type", Measured)
    tracemalloc.start()
    try:
        benchmark.pedantic(lambda: run_workload(workload), rounds=1, iterations=1)
    finally:
        tracemalloc.stop()
    return kept


def test_bytes_kept_per_request_and_per_step(benchmark, tmp_path, monkeypatch):
    """The 1,000,000-request replay in this process: what the recorder keeps to its close
    for the summary's exact answers (Recorder.retained_bytes: its arrays by trace request,
    the step summaries' values by step) at most 250 bytes a request and 100 a step; and all
    that Python allocated from the recorder's start to its close and still holds
    (tracemalloc, numpy's arrays included; C++ allocations, bounded by the live requests
    and the distinct inter-token gaps, are not traced) within the two budgets together."""
    requests = 20_000 if benchmark.disabled else 1_000_000
    workload = load_workload(WORKLOAD, [f"trace.generate.requests={requests}",
                                        f"output={tmp_path}"])
    kept = recorder_memory(benchmark, monkeypatch, workload)
    steps = kept["steps"]
    per_request, per_step = kept["request_bytes"] / requests, kept["step_bytes"] / steps
    budget = 250 * requests + 100 * steps
    print(f"\n{requests:,} requests, {steps:,} steps: the recorder keeps {per_request:.1f} B a "
          f"request and {per_step:.1f} B a step; Python holds {kept['traced'] / 2**20:.1f} MB "
          f"more at its close ({kept['traced'] / budget:.0%} of the budget)")
    benchmark.extra_info.update(bytes_per_request=per_request, bytes_per_step=per_step,
                                traced_mb=kept["traced"] / 2**20, steps=steps)
    if not benchmark.disabled:
        assert per_request <= 250 and per_step <= 100 and kept["traced"] <= budget
