"""Sessions in a workload (docs/workloads.md, "Sessions"): trace.generate.sessions and a
session trace file replayed by `steptrace run` (on the C++ loop, `auto`'s, as a request
trace), load.mode: sessions a closed loop of live sessions, and what a session replay
cannot take refused, exit 2."""

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness.commands import main
from harness.schema import arrow_schema
from harness.schema.tables import LABELS
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from harness.workload.trace import load_workload_trace
from tests.helpers import MODELED

pytestmark = pytest.mark.core

ENGINE = MODELED.split("\n", 2)[2].replace("num_kv_blocks: 256", "num_kv_blocks: 1024")
GENERATE = """trace:
  generate:
    rate: 20
    output: {uniform: [2, 12]}
    sessions: {count: 6, turns: {uniform: [2, 4]}, system_prompt: 64, input: {uniform: [4, 40]},
               tool_gap: {fixed: 0.25}, user_gap: {fixed: 0.5},
               fanout: {probability: 0.5, children: 2, turns: 1}}
"""


def workload(tmp_path, trace=GENERATE, extra=""):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\n{trace}{ENGINE}{extra}")
    return path


def run(path, sessions=True):
    """The run's folder; a session trace's has the sessions table, in its declared schema."""
    (done,) = run_workload(load_workload(path))
    manifest = json.loads((done.path / "manifest.json").read_text())
    assert manifest["values"]["replay_loop"] == "cpp"
    table = done.path / "sessions.parquet"
    assert table.exists() == sessions
    if sessions:
        assert pq.read_schema(table).remove_metadata() == arrow_schema("sessions", LABELS)
    return done.path


def requests(path, sessions=True) -> pd.DataFrame:
    return pd.read_parquet(run(path, sessions) / "requests.parquet").sort_values("request_id")


def test_the_sessions_table_sums_each_sessions_turns(tmp_path):
    path = workload(tmp_path)
    trace = load_workload_trace(load_workload(path)).df
    folder = run(path)
    table = pd.read_parquet(folder / "sessions.parquet")
    assert table["start_s"].is_monotonic_increasing
    assert len(table) == trace["session_id"].nunique() == 6
    rows = pd.read_parquet(folder / "requests.parquet").set_index("request_id").sort_index()
    rows = rows.join(trace[["gap_s", "parent_row"]])
    by = rows.groupby("session_id")
    table = table.set_index("session_id").sort_index()
    assert (table["turns"] == by.size()).all()
    assert (table["finished_turns"] == table["turns"]).all()
    roots = rows[rows["parent_row"] < 0].set_index("session_id").sort_index()
    assert (table["start_s"] == roots["arrival_s"]).all()
    assert (table["end_s"] == by["last_token_s"].max()).all()
    assert (table["makespan_s"] == table["end_s"] - table["start_s"]).all()
    assert (table["prefix_hit_tokens"] == by["prefix_hit_tokens"].sum()).all()
    gaps = rows[rows["parent_row"] >= 0].groupby("session_id")["gap_s"].sum()
    assert (table["gap_s"] == gaps.reindex(table.index, fill_value=0.0)).all()
    assert (table["subagent_turns"] > 0).any()
    assert (table["subagent_turns"] < table["turns"]).all()


def test_generated_sessions_run_their_turns_after_their_parents(tmp_path):
    path = workload(tmp_path)
    rows = requests(path)
    trace = load_workload_trace(load_workload(path)).df
    assert (rows["status"] == "finished").all()
    assert rows["session_id"].tolist() == trace["session_id"].tolist()
    assert rows["turn"].tolist() == trace["turn"].tolist()
    assert (rows["prefix_hit_tokens"] > 0).any()
    # a turn arrives after its parent's last token, by its gap
    child = trace["parent_row"] >= 0
    parent_end = rows["last_token_s"].to_numpy()[trace.loc[child, "parent_row"]]
    assert (rows.loc[child.to_numpy(), "arrival_s"].to_numpy()
            >= parent_end + trace.loc[child, "gap_s"].to_numpy() - 1e-9).all()


def test_a_request_trace_has_no_sessions(tmp_path):
    rows = requests(workload(tmp_path, MODELED.split("\n", 2)[0] + "\n"
                             + MODELED.split("\n", 2)[1] + "\n"), sessions=False)
    assert (rows["session_id"] == -1).all() and (rows["turn"] == -1).all()


@pytest.mark.parametrize("live", [1, 2])
def test_a_closed_loop_of_sessions_starts_the_next_when_one_ends(tmp_path, live):
    path = workload(tmp_path, extra=f"load: {{mode: sessions, sessions: {live}}}\n")
    rows = requests(path)
    span = rows.groupby("session_id").agg(start=("arrival_s", "min"),
                                           end=("last_token_s", "max")).sort_values("start")
    assert (span["start"].iloc[:live] == 0).all()
    # each later session starts as an earlier one ends: the live-th latest end before it
    for k in range(live, len(span)):
        ended = sorted(span["end"].iloc[:k])[k - live]
        assert span["start"].iloc[k] == ended


def test_a_session_file_is_told_by_its_first_line(tmp_path):
    turns = [dict(session_id=1, turn=0, parent=-1, arrival_s=0.0, gap_s=0.0,
                  gap_kind="user", input_tokens=30, max_new_tokens=4),
             dict(session_id=1, turn=1, parent=0, gap_s=1.5, gap_kind="tool",
                  input_tokens=6, max_new_tokens=3)]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    rows = requests(workload(tmp_path, "trace: {file: s.jsonl}\n"))
    assert rows["prompt_len"].tolist() == [30, 40]
    assert rows["arrival_s"].iloc[1] == rows["last_token_s"].iloc[0] + 1.5


def test_a_bad_session_file_exits_2_naming_file_line_and_session(tmp_path, capsys):
    turns = [dict(session_id=4, turn=0, parent=-1, arrival_s=0.0, gap_s=0.0,
                  gap_kind="user", input_tokens=30, max_new_tokens=4),
             dict(session_id=4, turn=1, parent=7, gap_s=1.5, gap_kind="tool",
                  input_tokens=6, max_new_tokens=3)]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    assert main(["run", str(workload(tmp_path, "trace: {file: s.jsonl}\n"))]) == 2
    err = capsys.readouterr().err
    assert "s.jsonl:2: session 4: turn 1's parent, turn 7, is missing" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("extra, message", [
    ("load: {mode: concurrency, concurrency: 2}\n", "load.mode: a session trace's closed "
                                                    "loop counts sessions"),
    ("load: {mode: sessions}\n", "load.sessions: load.mode: sessions needs"),
    ("load: {sessions: 2}\n", "load.sessions: only load.mode: sessions takes it"),
    ("frontend: {mode: thread}\n", "frontend.mode: a frontend thread runs on the real clock"),
])
def test_what_sessions_cannot_take_is_refused(tmp_path, capsys, extra, message):
    assert main(["validate", str(workload(tmp_path, extra=extra))]) == 2
    assert message in capsys.readouterr().err


def test_dropping_bad_rows_is_refused(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\n"
                    + GENERATE.replace("trace:\n", "trace:\n  drop_bad_rows: true\n") + ENGINE)
    assert main(["validate", str(path)]) == 2
    assert "trace.drop_bad_rows: a dropped turn would break its session" in \
        capsys.readouterr().err


@pytest.mark.parametrize("extra, mode", [
    ("device: cpu\nmodel: tiny\n", "inline"),  # a session trace's default
    ("device: cpu\nmodel: tiny\nfrontend: {mode: thread}\n", "thread"),
    ("device: cpu\nmodel: tiny\ntarget: {endpoint: 'http://127.0.0.1:1', model: m}\n",
     "inline"),
])
def test_sessions_take_the_frontend_thread_and_a_target(tmp_path, extra, mode):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\n{GENERATE}{extra}"
                    "load: {mode: sessions, sessions: 2}\n")
    workload = load_workload(path)
    assert workload.frontend.mode == mode and workload.clock == "real"
    assert (workload.target is None) == ("target" not in extra)


def test_a_pd_deployment_of_engine_processes_is_refused(tmp_path, capsys):
    path = workload(tmp_path)
    path.write_text(path.read_text().replace("device: modeled:H200", "device: cpu").replace(
        "deployment: {devices: 8, attention: {tp: 8}, dense: {tp: 8}, stack: roofline}",
        "deployment: {prefill: {devices: 1}, decode: {devices: 1}}"))
    assert main(["validate", str(path)]) == 2
    assert "deployment.prefill: sessions are replayed into engines in this process: expected " \
           "a P/D deployment on a modeled device" in capsys.readouterr().err


def test_load_mode_sessions_needs_a_session_trace(tmp_path, capsys):
    path = workload(tmp_path, "trace:\n  generate: {requests: 5}\n",
                    "load: {mode: sessions, sessions: 2}\n")
    assert main(["validate", str(path)]) == 2
    assert "load.mode: sessions replays a session trace" in capsys.readouterr().err


def test_generated_sessions_span_their_starts(tmp_path, capsys):
    path = workload(tmp_path, extra="warmup_steps: 150\n")
    assert main(["validate", str(path), "--set", "trace.generate.rate=1e-9"]) == 2
    assert "the arrivals would span 6e+09 s" in capsys.readouterr().err
    assert load_workload(path).notes == ()  # generate.requests is not the sessions' count


@pytest.mark.parametrize("assign", ["session_affinity", "cache_aware"])
def test_session_affinity_keeps_each_sessions_turns_on_one_rank(tmp_path, assign):
    """Without a prefix cache cache_aware spreads a session's turns by load alone; the
    replay gives each turn its session, which session_affinity keeps on one DP rank."""
    path = workload(tmp_path)
    text = path.read_text().replace("engine: {", f"engine: {{dp_assign: {assign}, "
                                    "prefix_caching: false, ", 1)
    path.write_text(text.replace("attention: {tp: 8}, dense: {tp: 8}",
                                 "attention: {dp: 8}, moe: {ep: 8}", 1))
    rows = requests(path)
    assert rows["dp_rank"].nunique() > 1
    ranks = rows.groupby("session_id")["dp_rank"].nunique()
    assert (ranks == 1).all() == (assign == "session_affinity")
