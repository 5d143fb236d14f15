"""What replaying a trace as sessions costs the harness per step: generated agentic sessions
replayed as sessions, against the same turns replayed open loop at the arrivals the session
run recorded (`steptrace trace convert --arrivals`), both on one loop (the C++ loop, a
modeled run's default, or the Python reference loop), the same modeled deployment on the
virtual clock: the same steps, so the ratio of the replays' times is the ratio per step. A
replay is timed from its requests' making to its tables and summary written
(harness/run/end_to_end.py, `_Running.replay`; not the trace's generation or reading, nor
the engine's start), by the harness process's CPU time (its threads; the table writer is a
process of its own), wall time beside it: on a busy shared host the wall time moves more.
Target: the sessions' bookkeeping (the event heap, each turn's links, the sessions table
and summary rows) within 1.1x per step, best against best of seven alternated runs of
each, asserted on the C++ loop (the Python reference loop's ratio is reported).

Run: python -m pytest tests/bench/test_sessions_bench.py --benchmark-enable -s
In the ordinary test run (benchmarks disabled) each arm runs once, on 6 sessions.
"""

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from harness.run import end_to_end
from harness.sweeps.sweep import run_workload
from harness.traces.open_loop import recorded_arrivals
from harness.traces.write import write_tidy
from harness.workload import load_workload
from harness.workload.trace import load_workload_trace

TARGET = 1.1
ROUNDS = 7
SESSIONS = dict(count=6, turns={"uniform": [2, 8]}, system_prompt=64,
                input={"uniform": [16, 64]}, tool_gap={"exponential": {"mean_s": 0.5}},
                user_gap={"lognormal": {"median_s": 2.0, "sigma": 1.0}},
                fanout={"probability": 0.2, "children": 2, "turns": 2})
ENGINE = dict(model="deepseek-v3", device="modeled:H200", precision="fp8",
              engine={"max_num_batched_tokens": 2048, "num_kv_blocks": 8192,
                      "block_size": 16, "prefix_caching": True},
              deployment={"devices": 8, "attention": {"tp": 8}, "dense": {"tp": 8},
                          "stack": "roofline"},
              calibration_requests=0, telemetry={"enabled": False})


def workloads(tmp_path: Path, sessions: int, loop: str):
    """(as sessions, open loop at the session run's arrivals), on `loop`."""
    spec = dict(ENGINE, replay_loop=loop, name="sessions", output=str(tmp_path / "runs"), trace={"generate": {
        "rate": 2.0, "output": {"uniform": [4, 32]}, "sessions": dict(SESSIONS, count=sessions)}})
    as_sessions = load_workload(_write(tmp_path / "sessions.yaml", spec))
    df = load_workload_trace(as_sessions).df
    (run,) = run_workload(as_sessions)
    rows = pd.read_parquet(run.path / "requests.parquet", columns=["request_id", "arrival_s",
                                                                   "prompt_len"])
    rows = rows.sort_values("request_id")
    open_loop = recorded_arrivals(df, rows["arrival_s"].to_numpy(np.float64),
                                  rows["prompt_len"].to_numpy(np.int64))
    write_tidy(open_loop, tmp_path / "open.parquet",
               hash_block_size=df.attrs.get("hash_block_size"))
    spec = dict(spec, name="open-loop", trace={"file": str(tmp_path / "open.parquet")})
    return as_sessions, load_workload(_write(tmp_path / "open.yaml", spec))


def _write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def _steps(run) -> int:
    return int(pd.read_parquet(run.path / "steps.parquet", columns=["step"])["step"].nunique())


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["cpp", "python"])
def test_sessions_cost_within_1_1x_per_step_of_the_open_loop(benchmark, tmp_path,
                                                             monkeypatch, loop):
    enabled = not benchmark.disabled
    as_sessions, open_loop = workloads(tmp_path, 2000 if enabled else 6, loop)
    timed: list = []
    replay = end_to_end._Running.replay

    def timed_replay(self, progress):
        started, wall = time.process_time(), time.perf_counter()
        try:
            return replay(self, progress)
        finally:
            timed.append((time.process_time() - started, time.perf_counter() - wall))

    monkeypatch.setattr(end_to_end._Running, "replay", timed_replay)
    seconds: dict = {"sessions": [], "open loop": []}
    walls: dict = {"sessions": [], "open loop": []}
    steps, hits = {}, {}
    for _ in range(ROUNDS if enabled else 1):  # alternated, so both see the same host
        for name, workload in (("sessions", as_sessions), ("open loop", open_loop)):
            (run,) = run_workload(workload)
            cpu, wall = timed.pop()
            seconds[name].append(round(cpu, 3))
            walls[name].append(round(wall, 3))
            steps[name] = _steps(run)
            hits[name] = int(pd.read_parquet(run.path / "requests.parquet",
                                             columns=["prefix_hit_tokens"]).sum().iloc[0])
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    best = {name: min(s) for name, s in seconds.items()}
    ratio = best["sessions"] / best["open loop"]
    wall = min(walls["sessions"]) / min(walls["open loop"])
    benchmark.extra_info.update(sessions_s=seconds["sessions"],
                                open_loop_s=seconds["open loop"], steps=steps, ratio=ratio,
                                sessions_wall_s=walls["sessions"],
                                open_loop_wall_s=walls["open loop"], wall_ratio=wall)
    print(f"\n{loop} loop, {steps['sessions']} steps, CPU: as sessions {seconds['sessions']} s, open loop "
          f"{seconds['open loop']} s: best {best['sessions']:.2f} / {best['open loop']:.2f} = "
          f"{ratio:.3f}x ({best['sessions'] / steps['sessions'] * 1e6:.1f} against "
          f"{best['open loop'] / steps['open loop'] * 1e6:.1f} us a step); wall: as sessions "
          f"{walls['sessions']} s, open loop {walls['open loop']} s, best {wall:.3f}x")
    assert steps["sessions"] == steps["open loop"]  # the same replay, step for step
    assert hits["sessions"] == hits["open loop"] > 0
    if enabled and loop == "cpp":
        assert ratio <= TARGET
