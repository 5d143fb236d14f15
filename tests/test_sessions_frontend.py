"""Sessions through the frontend's thread (harness/replay/frontend.py with sessions.py's
Turns) on the real clock: it enqueues each turn once its parent's last token is delivered
plus its gap, a next turn once every sub-agent has ended, a turn rejected as it came ending
there; a real engine's prefix cache serves the later turns."""

import json

import numpy as np
import pandas as pd
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig
from harness.replay.driver import Requests, replay
from harness.replay.frontend import Frontend
from harness.schema.tables import REQUESTS
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from harness.workload.trace import load_workload_trace
from tests.test_frontend import CLOCK_SKEW_S
from tests.test_sessions_replay import BLOCK, LogRecorder, sessions, turn
from tests.test_sessions_workload import GENERATE

pytestmark = pytest.mark.core

STATUS = REQUESTS.column("status")


def replayed(df, num_kv_blocks=1024, live=None):
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=num_kv_blocks,
                                                              block_size=BLOCK),
                                    model="deepseek-v3", executor="modeled:H200"))
    recorder = LogRecorder(len(df))
    frontend = Frontend(df["arrival_s"].to_numpy(np.float64), 20.0)
    try:
        assert replay(engine, Requests.of(df, BLOCK, live_sessions=live), "real", recorder,
                      frontend=frontend)
    finally:
        frontend.close()
        engine.close()
    rows = recorder.requests()
    rows["status"] = [STATUS.names_by_code()[c] for c in rows["status"]]
    return rows, frontend.columns(np.arange(len(df)))


def test_the_frontend_enqueues_each_turn_after_what_it_waits_for(tmp_path):
    df = sessions(tmp_path, [turn(0, 0, -1, out=6), turn(0, 1, 0, gap=0.1, new=20),
                             turn(1, 0, -1, out=3, at=0.02),
                             turn(1, 1, 0, gap=0.05, kind="subagent", out=5),
                             turn(1, 2, 1, gap=0.02, out=2),
                             turn(1, 3, 0, gap=0.1, kind="subagent", out=2),
                             turn(1, 4, 0, gap=0.05, kind="user", out=3)])
    rows, frontend = replayed(df)
    end, arrival, enqueue = rows["last_token_s"], rows["arrival_s"], rows["enqueue_s"]
    assert (rows["status"] == "finished").all()
    assert arrival[1] >= end[0] + 0.1
    assert arrival[3] >= end[2] + 0.05 and arrival[5] >= end[2] + 0.1
    assert arrival[4] >= end[3] + 0.02
    assert arrival[6] >= max(end[2], end[4], end[5]) + 0.05  # the join
    assert arrival[0] == 0.0 and arrival[2] == pytest.approx(0.02)
    # enqueued at its arrival, by the frontend's thread: its drift is that lag
    drift = frontend["enqueue_drift_s"]
    assert np.all(np.isfinite(drift)) and np.all(drift >= -CLOCK_SKEW_S)
    assert (enqueue >= arrival - CLOCK_SKEW_S).all()
    assert (enqueue - arrival < 0.1 + drift).all()


def test_a_turn_rejected_as_it_came_ends_there(tmp_path):
    # the second turn's prompt (200 + 4 + 900 tokens) needs more blocks than the pool has,
    # and so does the third's
    df = sessions(tmp_path, [turn(0, 0, -1, new=200, out=4),
                             turn(0, 1, 0, gap=0.02, new=900, out=2),
                             turn(0, 2, 1, gap=0.02, new=4, out=2)])
    rows, _ = replayed(df, num_kv_blocks=64)
    assert rows["status"].tolist() == ["finished", "rejected", "rejected"]
    assert rows["arrival_s"][2] >= rows["enqueue_s"][1] + 0.02 - CLOCK_SKEW_S


def test_a_closed_loop_through_the_frontend_keeps_its_sessions(tmp_path):
    df = sessions(tmp_path, [t for s in range(4) for t in (turn(s, 0, -1, out=4),
                                                           turn(s, 1, 0, gap=0.01))])
    rows, _ = replayed(df, live=1)
    rows = rows.assign(session=df["session_id"].to_numpy())
    span = rows.groupby("session").agg(start=("arrival_s", "min"), end=("last_token_s", "max"))
    span = span.sort_values("start")
    assert (span["start"].iloc[1:].to_numpy() >= span["end"].iloc[:-1].to_numpy()).all()


@pytest.mark.slow
def test_a_tiny_model_on_cpu_replays_sessions_through_the_frontend(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\n{GENERATE}"
                    "engine: {max_num_batched_tokens: 512, num_kv_blocks: 512, block_size: 16}\n"
                    "model: tiny\ndevice: cpu\nfrontend: {mode: thread}\n"
                    "calibration_requests: 0\ntelemetry: {enabled: false}\n")
    workload = load_workload(path)
    trace = load_workload_trace(workload).df
    (done,) = run_workload(workload)
    manifest = json.loads((done.path / "manifest.json").read_text())
    assert manifest["values"]["frontend"]["mode"] == "thread"
    rows = pd.read_parquet(done.path / "requests.parquet").sort_values("request_id")
    assert (rows["status"] == "finished").all() and len(rows) == len(trace)
    assert np.isfinite(rows["enqueue_drift_s"]).all()
    child = (trace["parent_row"] >= 0).to_numpy()
    parent_end = rows["last_token_s"].to_numpy()[trace.loc[child, "parent_row"]]
    assert (rows["arrival_s"].to_numpy()[child]
            >= parent_end + trace.loc[child, "gap_s"].to_numpy() - CLOCK_SKEW_S).all()
    assert (rows["prefix_hit_tokens"].to_numpy()[child] > 0).all()
    assert len(pd.read_parquet(done.path / "sessions.parquet")) == 6


def test_the_engine_thread_is_told_each_sessions_end_after_its_last_turn(tmp_path):
    df = sessions(tmp_path, [turn(0, 0, -1, out=3), turn(0, 1, 0, gap=0.02),
                             turn(1, 0, -1, out=2, at=0.01),
                             turn(1, 1, 0, gap=0.1, kind="subagent", out=2),
                             turn(1, 2, 0, gap=0.1, out=2)])
    engine = LLMEngine(EngineConfig(
        scheduler=SchedulerConfig(num_kv_blocks=1024, block_size=BLOCK, session_retention=True),
        model="deepseek-v3", executor="modeled:H200"))
    events, add, end = [], engine.add_request, engine.end_session
    engine.add_request = lambda i, **kw: (events.append(("turn", int(df["session_id"][i]))),
                                          add(i, **kw))[1]
    engine.end_session = lambda s: (events.append(("end", s)), end(s))[1]
    frontend = Frontend(df["arrival_s"].to_numpy(np.float64), 20.0)
    try:
        assert replay(engine, Requests.of(df, BLOCK), "real", LogRecorder(len(df)),
                      frontend=frontend)
    finally:
        frontend.close()
        engine.close()
    # session 0 ends while session 1 runs; the last session's end may come after the last
    # step, when nothing is left to hold
    ends = [s for kind, s in events if kind == "end"]
    assert ends in ([0], [0, 1])
    for s in ends:  # told on the engine's thread, after the session's every turn was added
        assert events.index(("end", s)) > max(k for k, e in enumerate(events) if e == ("turn", s))
