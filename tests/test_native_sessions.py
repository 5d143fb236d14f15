"""Sessions replayed by the C++ loops against the Python ones (docs/workloads.md,
"Sessions"): a session trace's runs, co-located and in a P/D deployment, open loop and a
closed loop of live sessions, sub-agents fanning out, a rejected turn, write equal tables
(the requests and sessions tables, and the steps and batches), host timings aside; and the
session_affinity prefill router keeps a session's turns on one prefill instance."""

import json

import numpy as np
import pandas as pd
import pytest

from engine import _core
from harness.analysis.exact import HOST_COLUMNS, TABLES, first_difference
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from harness.workload.trace import load_workload_trace

from .test_sessions_workload import ENGINE, GENERATE

pytestmark = pytest.mark.core

CLOSED = "load: {mode: sessions, sessions: 2}\n"
PD = """model: tiny
device: modeled:H800
engine: {max_num_batched_tokens: 512, block_size: 16}
deployment:
  prefill: {instances: 3}
  decode: {instances: 2, engine: {num_kv_blocks: 400}}
  kv_transfer: {link: 0.05, latency_us: 20, layerwise: true}
  router: {prefill: %s, decode: least_kv}
calibration_requests: 0
telemetry: {enabled: false}
"""


def turn(sid, k, parent, *, gap=0.0, kind="tool", new=30, out=6, at=0.0):
    return dict(session_id=sid, turn=k, parent=parent, arrival_s=at, gap_s=gap,
                gap_kind=kind, input_tokens=new, max_new_tokens=out)


def both_loops(tmp_path, text, extra=()):
    """Each loop's run of the workload `text`: {loop: Run}."""
    path = tmp_path / "w.yaml"
    path.write_text(text)
    runs = {}
    for loop in ("python", "cpp"):
        (runs[loop],) = run_workload(load_workload(path, [f"replay_loop={loop}",
                                                          f"output={tmp_path / loop}", *extra]))
    return runs


def table(run, name) -> pd.DataFrame:
    frame = pd.read_parquet(run.path / f"{name}.parquet")
    frame = frame.drop(columns=[c for c in frame if c in HOST_COLUMNS])
    if name == "requests":
        frame = frame.sort_values("request_id", ignore_index=True)
    return frame


def assert_equal(runs) -> pd.DataFrame:
    """The two loops' tables equal; the requests table returned."""
    for name in ("requests", "sessions"):
        pd.testing.assert_frame_equal(table(runs["python"], name), table(runs["cpp"], name))
    for name in TABLES:
        assert first_difference(runs["python"], runs["cpp"], name) is None, name
    return table(runs["cpp"], "requests")


def arrive_after_their_parents(rows: pd.DataFrame, path) -> bool:
    """Each child turn arrived at its parent's last token plus its gap."""
    trace = load_workload_trace(load_workload(path)).df
    child = (trace["parent_row"] >= 0).to_numpy()
    parent_end = rows["last_token_s"].to_numpy()[trace.loc[child, "parent_row"]]
    return bool((rows.loc[child, "arrival_s"].to_numpy()
                 >= parent_end + trace.loc[child, "gap_s"].to_numpy() - 1e-9).all())


@pytest.mark.parametrize("engine, extra", [("", ""), ("", CLOSED), ("overlap: true, ", "")])
def test_the_two_loops_replay_generated_sessions_alike(tmp_path, engine, extra):
    text = f"{GENERATE}{ENGINE}{extra}".replace("engine: {", "engine: {" + engine, 1)
    rows = assert_equal(both_loops(tmp_path, text))
    assert (rows["status"] == "finished").all()
    assert arrive_after_their_parents(rows, tmp_path / "w.yaml")


def test_the_two_loops_replay_a_rejected_turn_alike(tmp_path, monkeypatch):
    """A sub-agent's turn too long for a rank's KV pool is rejected; its parent's next turn
    still comes, and so does the next session of the closed loop. (A file's such turn is
    refused before running; a pool known only once the engine is built, or a generated
    session's, meets it at run time, as here with the check let through.)"""
    monkeypatch.setattr("harness.workload.session_checks.turns_fit", lambda *a: None)
    turns = [turn(0, 0, -1), turn(0, 1, 0, gap=0.1, kind="subagent", new=20_000),
             turn(0, 2, 0, gap=0.2, kind="subagent"), turn(0, 3, 0, gap=0.3, new=8),
             turn(1, 0, -1, at=0.5), turn(1, 1, 0, gap=0.05)]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    rows = assert_equal(both_loops(tmp_path, f"trace: {{file: s.jsonl}}\n{ENGINE}{CLOSED}",
                                   ["load.sessions=1"]))
    assert rows["status"].tolist() == ["finished", "rejected", "finished", "finished",
                                       "finished", "finished"]
    assert rows["arrival_s"].iloc[4] == rows["last_token_s"].iloc[3]  # session 1 after 0


@pytest.mark.parametrize("router, extra", [("session_affinity", ""),
                                           ("session_affinity", CLOSED),
                                           ("round_robin", "")])
def test_the_two_pd_loops_replay_sessions_alike(tmp_path, router, extra):
    rows = assert_equal(both_loops(tmp_path, f"{GENERATE}{PD % router}{extra}"))
    assert (rows["status"] == "finished").all()
    assert arrive_after_their_parents(rows, tmp_path / "w.yaml")


@pytest.mark.parametrize("router", ["session_affinity", "round_robin"])
def test_session_affinity_keeps_each_sessions_turns_on_one_prefill_instance(tmp_path, router):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\n{GENERATE}{PD % router}")
    # no system prompt: sessions share no prefix, and cache_aware spreads their first turns
    (run,) = run_workload(load_workload(path, ["trace.generate.sessions.system_prompt=0"]))
    rows = table(run, "requests")
    assert rows["prefill_instance"].nunique() > 1
    instances = rows.groupby("session_id")["prefill_instance"].nunique()
    assert (instances == 1).all() == (router == "session_affinity")


@pytest.mark.parametrize("deployment", ["co-located", "pd"])
def test_the_two_loops_hold_a_waiting_sessions_blocks_alike(tmp_path, deployment):
    """session_retention under pressure: each loop tells its engines when a session has
    ended, so held blocks are let go at the same steps."""
    text = f"{GENERATE}{ENGINE}" if deployment == "co-located" else \
        f"{GENERATE}{PD % 'session_affinity'}"
    # 30 sessions, some ended while others wait, on 32 blocks: the Python loop's hits
    # differ where its engine is never told a session's end
    runs = both_loops(tmp_path, text, ["engine.session_retention=true",
                                       "engine.num_kv_blocks=32", "trace.generate.rate=5",
                                       "trace.generate.sessions.count=30"])
    rows = assert_equal(runs)
    assert (rows["prefix_hit_tokens"] > 0).any()


@pytest.mark.parametrize("sessions, message", [
    (None, "sessions: (parent, gap_s, subagent, session_id, live)"),
    (([-1, -5], [0.0, 0.0], [False, False], [0, 0], None), "parent is an earlier row, or -1"),
    (([-1, 1], [0.0, 0.0], [False, False], [0, 0], None), "parent is an earlier row, or -1")])
def test_the_bound_turn_release_refuses_what_is_no_tree(sessions, message):
    if sessions is not None:
        sessions = tuple(np.asarray(a, t) for a, t in zip(
            sessions[:4], (np.int64, np.float64, bool, np.int64))) + (None,)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _core.SessionTurns(sessions, np.zeros(2))
