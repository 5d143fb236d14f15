"""Memory bounded by what is live, for a session trace: the peak RSS of a replay of about
1,000,000 generated turns (200,000 sessions) against one of about 100,000 (20,000), each run
in a process of its own (tests/bench/replay_rss.py), as test_memory_bench.py measures the
million requests: workloads/bench_million.yaml's modeled deployment, its trace generated as
sessions (`trace.generate.sessions`) whose starts keep a few hundred sessions live. Two
phases, each its own peak: the trace's generation, then the replay with its tables and
summary (the trace held). Target: the request trace's 1.3x, on the process's peak.

Run: python -m pytest tests/bench/test_sessions_memory_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) it replays 400 and 4,000 sessions.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.workload import load_workload
from tests.bench.test_memory_bench import ROOT, WORKLOAD, recorder_memory

pytestmark = pytest.mark.slow

TARGET = 1.3
COUNT = "trace.generate.sessions.count"


def sessions_workload(tmp_path: Path) -> Path:
    """bench_million.yaml with its trace generated as sessions: 20 a second, 5 turns each
    on average (2 to 8), short inputs and outputs after a 64-token system prompt."""
    spec = yaml.safe_load(WORKLOAD.read_text())
    spec["name"] = "bench-sessions"
    spec["trace"] = {"generate": {
        "rate": 20, "output": spec["trace"]["generate"]["output"],
        "sessions": {"count": 1000, "turns": {"uniform": [2, 8]}, "system_prompt": 64,
                     "input": {"uniform": [16, 64]}}}}
    path = tmp_path / "bench_sessions.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def phases(workload: Path, sessions: int, output: Path) -> dict:
    """replay_rss.py's figures of one run of `sessions` sessions, in its own process."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.replay_rss", str(workload),
         "--set", f"{COUNT}={sessions}", "--set", f"output={output}"],
        capture_output=True, text=True, cwd=ROOT, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.splitlines()[-1])
    figures["peak_mb"] = max(figures["trace_peak_mb"], figures["replay_peak_mb"])
    return figures


def test_peak_rss_does_not_grow_with_turns(benchmark, tmp_path):
    small, large = (20_000, 200_000) if not benchmark.disabled else (400, 4_000)
    workload = sessions_workload(tmp_path)
    measured = {}

    def measure():
        for sessions in (small, large):
            measured[sessions] = phases(workload, sessions, tmp_path / str(sessions))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    a, b = measured[small], measured[large]
    ratio = {k: b[k] / a[k] for k in ("peak_mb", "trace_peak_mb", "loaded_mb",
                                      "replay_peak_mb")}
    print(f"\npeak RSS: {a['turns']:,} turns {a['peak_mb']:.0f} MB, {b['turns']:,} turns "
          f"{b['peak_mb']:.0f} MB ({ratio['peak_mb']:.2f}x). Generating the trace: peak "
          f"{a['trace_peak_mb']:.0f} and {b['trace_peak_mb']:.0f} MB, "
          f"{ratio['trace_peak_mb']:.2f}x; held after it {a['loaded_mb']:.0f} and "
          f"{b['loaded_mb']:.0f} MB; the replay's peak {a['replay_peak_mb']:.0f} and "
          f"{b['replay_peak_mb']:.0f} MB, {ratio['replay_peak_mb']:.2f}x")
    benchmark.extra_info.update(small=a, large=b, ratio=ratio)
    if not benchmark.disabled:
        assert ratio["peak_mb"] <= TARGET


def test_bytes_kept_and_held_per_turn(benchmark, tmp_path, monkeypatch):
    """The million turns replayed in this process, as test_memory_bench.py's
    test_bytes_kept_per_request_and_per_step reads the million requests: what the recorder
    keeps to its close at most 250 bytes a turn and 100 a step, and all that Python
    allocated from the recorder's start and still holds at its close within the two
    budgets together. Beside them, the most Python held above the recorder's start at any
    moment before its close (tracemalloc's peak): the replay's own structures by turn, freed
    when it ends, are there and not in what is kept."""
    sessions = 4_000 if benchmark.disabled else 200_000
    workload = load_workload(sessions_workload(tmp_path), [f"{COUNT}={sessions}",
                                                           f"output={tmp_path}"])
    kept = recorder_memory(benchmark, monkeypatch, workload)
    steps, turns = kept["steps"], kept["rows"]
    per_turn, per_step = kept["request_bytes"] / turns, kept["step_bytes"] / steps
    budget = 250 * turns + 100 * steps
    print(f"\n{turns:,} turns, {steps:,} steps: the recorder keeps {per_turn:.1f} B a turn "
          f"and {per_step:.1f} B a step; Python holds {kept['traced'] / 2**20:.1f} MB more at "
          f"its close ({kept['traced'] / budget:.0%} of the budget), and held at most "
          f"{kept['peak'] / 2**20:.1f} MB more ({kept['peak'] / turns:.0f} B a turn)")
    benchmark.extra_info.update(bytes_per_turn=per_turn, bytes_per_step=per_step,
                                traced_mb=kept["traced"] / 2**20,
                                peak_mb=kept["peak"] / 2**20, steps=steps, turns=turns)
    if not benchmark.disabled:
        assert per_turn <= 250 and per_step <= 100 and kept["traced"] <= budget
