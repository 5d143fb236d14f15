"""The public session trace formats (harness/traces/mooncake_sessions.py, weka_sessions.py):
each bundled sample read as sessions (its turns, its sessions, a parent and a gap checked by
hand against the file, the hash-id prefix rule on every turn), bad input refused naming the
file, the line and the session, `steptrace trace stats` on each, and one sample replayed
end to end as sessions on a modeled deployment."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.commands import main
from harness.sweeps.sweep import run_workload
from harness.traces.mooncake_sessions import parents, read_mooncake_sessions
from harness.traces.read import TraceError, read_trace
from harness.traces.session_readers import read_session_file
from harness.traces.sessions import GAP_KINDS
from harness.traces.weka_sessions import read_weka
from harness.workload import load_workload
from harness.workload.trace import load_workload_trace
from tests.helpers import MODELED

TRACES = Path(__file__).resolve().parents[1] / "workloads" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_head400.jsonl"
WEKA = TRACES / "weka_agentic_sample.jsonl"
SHA256 = {  # as workloads/traces/README.md states them
    MOONCAKE: "8090d6a38401d280fd88112ba22007ff4354be59c986f4f6bcc250edd45a52dc",
    WEKA: "1e6fd0f364001060170dc33846686e62230e956b05ba5ba658b2afc6a2653f2c"}
WEKA_FILES = {  # each line of the WEKA sample: a trace file of kv-cache-tester, unchanged
    "trace_0026": "84e843bd3a1c799b37bbb55e2f05699e6b3e05ed71c252cd06276a6d5e8c7a39",
    "trace_0187": "654b01df7e252ac3edfb0a6087f3c2fa9b8b9cb7973818e4abc368279e07fe1c",
    "trace_0504": "a902593802a8d08f95e4ad9f08a4a254d6511ad8d72faa403945f61c2cbef58f",
    "trace_0277": "389988c4309ffe1759bdc3559c69b3e5840d7d2e87a44e2a02754df9d015c201"}


def line(path, n) -> dict:
    return json.loads(path.read_text().splitlines()[n - 1])


def children(df):
    child = df[df["parent_row"] >= 0]
    return child, df.loc[child["parent_row"].to_numpy()]


def prefix_rule_holds(df, block) -> bool:
    """Every child's ids lead with its parent's full prompt blocks; its prompt is its
    parent's prompt and output and its own input."""
    child, parent = children(df)
    return all(c[:p_len // block] == p[:p_len // block] for c, p, p_len in zip(
        child["hash_ids"], parent["hash_ids"], parent["prompt_len"])) and \
        (child["prompt_len"].to_numpy() == parent["prompt_len"].to_numpy()
         + parent["max_new_tokens"].to_numpy() + child["input_tokens"].to_numpy()).all()


@pytest.mark.parametrize("path", [MOONCAKE, WEKA])
def test_the_bundled_samples_are_the_files_the_readme_names(path):
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[path]


def test_each_line_of_the_weka_sample_is_a_published_trace_file_byte_for_byte():
    rows = WEKA.read_bytes().split(b"\n")
    assert rows[-1] == b"" and len(rows) == 5
    assert [json.loads(r)["id"] for r in rows[:-1]] == list(WEKA_FILES)
    assert [hashlib.sha256(r).hexdigest() for r in rows[:-1]] == list(WEKA_FILES.values())


@pytest.mark.parametrize("path, fmt", [(TRACES / "agentic_sessions.csv", "sessions"),
                                       (MOONCAKE, "mooncake_sessions"), (WEKA, "weka")])
def test_a_frames_gap_kind_is_a_category_of_the_three_kinds(path, fmt):
    kinds = read_session_file(path, fmt).df["gap_kind"]
    assert isinstance(kinds.dtype, pd.CategoricalDtype)
    assert sorted(kinds.cat.categories) == sorted(GAP_KINDS) and kinds.notna().all()


# ---------------------------------------------------------------- Mooncake

def test_the_mooncake_sample_reads_as_sessions_chained_by_hash_ids():
    res = read_mooncake_sessions(MOONCAKE)
    df = res.df
    assert (res.source, res.hash_block_size, res.time_unit) == ("mooncake_sessions", 512, "ms")
    assert len(df) == 400 and df["session_id"].nunique() == 369
    assert (df["parent_row"] >= 0).sum() == 31 and df.groupby("session_id").size().max() == 3
    assert prefix_rule_holds(df, 512)
    assert set(df["gap_kind"]) == {"user"}


def test_a_mooncake_chain_checked_by_hand():
    """Line 67's full blocks lead lines 134's ids and line 134's lead line 281's; each
    prompt holds its parent's prompt and output: one session of three turns."""
    a, b, c = line(MOONCAKE, 67), line(MOONCAKE, 134), line(MOONCAKE, 281)
    assert b["hash_ids"][:5] == a["hash_ids"][:5] and c["hash_ids"][:5] == b["hash_ids"][:5]
    rows = parents(read_trace(MOONCAKE).df, 512)
    assert (rows[133], rows[280]) == (66, 133) and rows[66] == -1
    df = read_mooncake_sessions(MOONCAKE).df
    (sid,) = df.loc[df["prompt_len"] == c["input_length"], "session_id"]
    s = df[df["session_id"] == sid]
    assert s["prompt_len"].tolist() == [a["input_length"], b["input_length"], c["input_length"]]
    assert s["input_tokens"].tolist()[1:] == [3024 - 2651 - 366, 3142 - 3024 - 111]
    assert s["gap_s"].tolist()[1:] == pytest.approx([27.0, 47.999])
    assert s["arrival_s"].iloc[0] == pytest.approx(21.0)  # the root's timestamp, from 0


def mooncake(tmp_path, rows, name="m.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def req(ts, n_in, out, ids):
    return dict(timestamp=ts, input_length=n_in, output_length=out, hash_ids=ids)


def test_a_shared_system_prompt_links_nothing(tmp_path):
    rows = [req(0, 1000, 10, [0, 1]),         # its one full block: 0, a system prompt's
            req(10, 700, 10, [0, 2]),         # too short to follow line 1; holds block 0 too
            req(20, 2000, 10, [0, 3, 4, 5])]  # would follow line 1, but 0 is two sessions'
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, -1, -1]
    del rows[1]  # block 0 then line 1's alone
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, 0]


def test_two_sessions_sharing_a_system_prompt_link_only_their_own_turns(tmp_path):
    """Blocks 0 and 1 are a system prompt. Line 1's full blocks are only those, and it is
    the first to hold them: line 2 (another session, already holding blocks 0 and 1) must
    not follow it, though no other session had held them when line 2 came."""
    rows = [req(0, 1100, 10, [0, 1, 10]),            # session A: the system prompt + 76
            req(10, 2100, 10, [0, 1, 20, 21, 22]),   # session B's first turn
            req(20, 2600, 10, [0, 1, 20, 21, 23, 24]),  # B's next: leads with B's blocks
            req(30, 1700, 10, [0, 1, 11, 12]),       # A's next, or another session's?
            req(40, 2200, 10, [0, 1, 11, 13, 14])]   # line 4's next
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, -1, 1, -1, 3]
    df = read_mooncake_sessions(mooncake(tmp_path, rows)).df
    assert df.groupby("session_id").size().tolist() == [1, 2, 2]


def test_a_context_continued_twice_links_neither_continuation(tmp_path):
    rows = [req(0, 1100, 10, [1, 2, 3]), req(10, 1200, 10, [1, 2, 4]),  # holds line 1's context
            req(20, 1150, 10, [1, 2, 5])]  # so does this, and not line 2's: a fork
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, -1, -1]
    rows[2] = req(20, 1300, 10, [1, 2, 5])  # holds line 2's full blocks and context too
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, 0, 1]
    rows[2] = req(20, 1300, 10, [1, 3, 5])  # forks after block 1, not after line 1's blocks
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, 0, -1]


def test_a_prompt_short_of_its_would_be_parents_context_is_a_root(tmp_path):
    rows = [req(0, 1024, 100, [0, 1]), req(5, 1124, 10, [0, 1, 2])]  # 1124 < 1024 + 100 + 1
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, -1]
    rows[1] = req(5, 1125, 10, [0, 1, 2])
    assert parents(read_trace(mooncake(tmp_path, rows)).df, 512) == [-1, 0]


def test_bad_mooncake_input_is_refused_naming_the_file_and_line(tmp_path):
    path = mooncake(tmp_path, [req(0, 100, 1, [0]), req(1, 0, 1, [1])])
    with pytest.raises(TraceError, match=r"m\.jsonl:2: .*input_length"):
        read_mooncake_sessions(path)
    path = mooncake(tmp_path, [dict(timestamp=0, input_length=5, output_length=1)])
    with pytest.raises(TraceError, match=r"m\.jsonl: mooncake_sessions derives sessions from "
                                         r"hash_ids, and no record has them"):
        read_mooncake_sessions(path)
    path = mooncake(tmp_path, [req(0, 1000, 1, [0])])  # 2 blocks of 512, 1 id
    with pytest.raises(TraceError, match=r"m\.jsonl:1: session 0: turn 0: hash_ids: 1 ids"):
        read_mooncake_sessions(path)


# ---------------------------------------------------------------- WEKA

def test_the_weka_sample_reads_as_sessions_with_sub_agents():
    res = read_weka(WEKA)
    df = res.df
    assert (res.source, res.hash_block_size) == ("weka", 64)
    assert df.groupby("session_id").size().tolist() == [3, 3, 3, 53]
    assert (df["gap_kind"] == "subagent").sum() == 4 and (df["arrival_s"] == 0).all()
    calls = [c for n in range(1, 5) for c in weka_calls(line(WEKA, n)["requests"])]
    assert df["prompt_len"].tolist() == [c["in"] for c in calls]  # derived/recorded: 1.0
    assert [ids[:len(c["hash_ids"])] for ids, c in zip(df["hash_ids"], calls)] == [
        [(sid << 32) + h for h in c["hash_ids"]] for sid, c in zip(df["session_id"], calls)]
    own = [{h for ids in s["hash_ids"] for h in ids} for _, s in df.groupby("session_id")]
    assert all(not (a & b) for i, a in enumerate(own) for b in own[i + 1:])  # local scope


def weka_calls(requests):
    """A conversation's model calls in file order, each sub-agent's where its marker is."""
    for e in requests:
        yield from weka_calls(e["requests"]) if e["type"] == "subagent" else [e]


def test_a_weka_fan_out_checked_by_hand():
    """trace_0277: requests[0], then three sub-agent markers (ended at t 79.224, 183.906 and
    211.347), then requests[4] at t 228: three sub-agent children of the first call, and the
    call after them its next turn, 228 - 211.347 s after the last sub-agent ended."""
    trace = line(WEKA, 4)["requests"]
    df = read_weka(WEKA).df
    base = int(df.index[df["session_id"] == 3][0])
    s = df[df["session_id"] == 3].reset_index(drop=True)
    first, subs = 0, [1, 5, 17]  # each sub-agent's first call, in file order
    assert (s.loc[subs, "parent_row"] == base + first).all()
    assert (s.loc[subs, "gap_kind"] == "subagent").all()
    after = 1 + sum(len(trace[k]["requests"]) for k in (1, 2, 3))
    assert s.loc[after, "turn"] == after and s.loc[after, "parent"] == first
    assert s.loc[after, "gap_kind"] == "tool"
    assert s.loc[after, "gap_s"] == pytest.approx(228.0 - 211.347)
    assert s.loc[after, "prompt_len"] == trace[4]["in"] == 32182  # it holds its parent's
    assert s.loc[after + 1, "gap_s"] == trace[5]["think_time"] == 8.0
    assert s.loc[subs[0], "prompt_len"] == trace[1]["requests"][0]["in"]  # its own prompt


def weka(tmp_path, requests, name="w.jsonl", **top):
    conv = dict(id="x", block_size=64, hash_id_scope="local", requests=requests, **top)
    path = tmp_path / name
    path.write_text(json.dumps(conv) + "\n")
    return path


def call(t, n_in, out, **extra):
    return {"t": t, "type": "n", "in": n_in, "out": out, "hash_ids": list(range(n_in // 64)),
            "input_types": ["tool_result"], "think_time": 1.0, **extra}


@pytest.mark.parametrize("requests, words", [
    ([dict(t=5, type="subagent", requests=[call(0, 100, 5)])],
     r"w\.jsonl:1: session 0: requests\[0\]: a sub-agent before any call of its thread"),
    ([call(0, 100, 5), {k: v for k, v in call(1, 200, 5).items() if k != "in"}],
     r"w\.jsonl:1: session 0: requests\[1\]\.in: expected an integer >= 1, got None"),
    ([call(0, 100, 5), dict(t=5, type="subagent", requests=[])],
     r"w\.jsonl:1: session 0: requests\[1\]\.requests: expected a non-empty list"),
    ([call(0, 100, 5, hash_ids=[-1])],
     r"w\.jsonl:1: session 0: requests\[0\]\.hash_ids: expected a list of integers"),
    ([call(0, 100, 5, think_time="1")],
     r"w\.jsonl:1: session 0: requests\[0\]\.think_time: expected a number of seconds"),
    ([{k: v for k, v in call(0, 100, 5).items() if k != "t"},
      {k: v for k, v in call(1, 200, 5).items() if k != "think_time"}],
     r"w\.jsonl:1: session 0: requests\[0\]\.t: expected a number of seconds"),
    ([call(0, 100, 5, api_time="2"),
      {k: v for k, v in call(1, 200, 5).items() if k != "think_time"}],
     r"w\.jsonl:1: session 0: requests\[0\]\.api_time: expected a number of seconds"),
    ([], r"w\.jsonl:1: session 0: requests: expected a non-empty list")])
def test_bad_weka_input_is_refused_naming_the_file_line_and_session(tmp_path, requests, words):
    with pytest.raises(TraceError, match=words):
        read_weka(weka(tmp_path, requests))


def test_a_weka_file_of_mixed_block_sizes_or_bad_lines_is_refused(tmp_path):
    path = weka(tmp_path, [call(0, 100, 5)])
    other = json.loads(path.read_text()) | dict(block_size=16)
    path.write_text(path.read_text() + json.dumps(other) + "\n")
    with pytest.raises(TraceError, match=r"w\.jsonl: block_size 64 and 16 \(lines 1, 2\)"):
        read_weka(path)
    with pytest.raises(TraceError, match=r"w\.jsonl: .*hash_block_size 16: a trace's hash "):
        read_weka(weka(tmp_path, [call(0, 100, 5)]), 16)
    path.write_text(json.dumps(json.loads(path.read_text().splitlines()[0])) + "\n{oops\n")
    with pytest.raises(TraceError, match=r"w\.jsonl:2: not a JSON object"):
        read_weka(path)


def test_a_weka_call_that_drops_context_keeps_its_recorded_prompt(tmp_path):
    """A compacted context (in below its parent's prompt and output) is replayed as
    recorded, sharing the blocks its ids say; a 0-token output asks for one token."""
    first, second = call(0, 1000, 200), call(9, 300, 0, hash_ids=[0, 1, 77, 78])
    df = read_weka(weka(tmp_path, [first, second])).df
    assert df["prompt_len"].tolist() == [1000, 300]
    assert df["max_new_tokens"].tolist() == [200, 1] and df["input_tokens"].tolist()[1] == 1
    ids = df["hash_ids"].tolist()
    assert ids[0][:15] == list(range(15)) and len(ids[0]) == 16  # a fresh id for the tail
    assert ids[1][:4] == [0, 1, 77, 78] and len(ids[1]) == 5


# ---------------------------------------------------------------- trace stats

@pytest.mark.parametrize("path, fmt, kinds", [(MOONCAKE, "mooncake_sessions", {"user"}),
                                              (WEKA, "auto", {"subagent", "tool", "user"})])
def test_trace_stats_reports_each_sample_by_turn_index(capsys, path, fmt, kinds):
    assert main(["trace", "stats", str(path), "--format", fmt, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    df = (read_mooncake_sessions(path) if fmt != "auto" else read_weka(path)).df
    assert s["source"] == ("weka" if fmt == "auto" else fmt) and s["requests"] == len(df)
    assert set(s["gap_s"]) == kinds == set(s["sessions"]["gap_s_mean"])
    rows = s["by_turn"]
    assert rows[0]["turns"] == "0" and rows[0]["count"] == df["session_id"].nunique()
    assert sum(r["count"] for r in rows) == len(df)
    assert rows[0]["reuse_bound"] < rows[1]["reuse_bound"]  # later turns reuse their context
    assert main(["trace", "stats", str(path), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "turn index" in out and "reuse bound" in out and "gap_s user" in out


def test_auto_reads_a_mooncake_file_as_requests_its_sessions_only_by_name(capsys):
    assert main(["trace", "stats", str(MOONCAKE), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["source"] == "mooncake" and "by_turn" not in s


def test_trace_stats_exits_2_naming_the_bad_line(tmp_path, capsys):
    path = weka(tmp_path, [call(0, 100, 5), dict(t=1, type="n")])
    assert main(["trace", "stats", str(path)]) == 2
    assert "w.jsonl:1: session 0: requests[1].in" in capsys.readouterr().err


def test_by_turn_groups_indices_in_powers_of_two(tmp_path, capsys):
    rows = [dict(session_id=0, turn=k, parent=k - 1, arrival_s=0.0, gap_s=1.0,
                 gap_kind="tool", input_tokens=10, max_new_tokens=5) for k in range(5)]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["trace", "stats", str(path), "--json", "--hash-block-size", "4"]) == 0
    by_turn = json.loads(capsys.readouterr().out)["by_turn"]
    assert [(r["turns"], r["count"]) for r in by_turn] == [("0", 1), ("1", 1), ("2-3", 2),
                                                           ("4-7", 1)]
    assert [r["prompt_len_mean"] for r in by_turn] == [10, 25, (40 + 55) / 2, 70]


@pytest.mark.parametrize("path, fmt, told", [(MOONCAKE, "mooncake_sessions", "mooncake_sessions"),
                                             (WEKA, "auto", "weka"),
                                             (MOONCAKE, "auto", "auto")])
def test_a_workload_names_a_public_session_format_or_auto_tells_weka(tmp_path, path, fmt, told):
    w = tmp_path / "w.yaml"
    engine = MODELED.split("\n", 2)[2].replace("num_kv_blocks: 256", "num_kv_blocks: auto")
    w.write_text(f"trace: {{file: {path}, format: {fmt}}}\n" + engine)  # a pool its turns fit
    workload = load_workload(w)
    assert workload.trace.format == told
    df = load_workload_trace(workload).df
    assert ("parent_row" in df.columns) == (told != "auto") and len(df) == (
        400 if path == MOONCAKE else 62)


@pytest.mark.slow
@pytest.mark.core
def test_the_weka_sample_replays_as_sessions_on_a_modeled_deployment(tmp_path):
    workload = (TRACES.parent / "sessions_h200.yaml").read_text().replace(
        "file: traces/agentic_sessions.csv", f"file: {WEKA}")
    path = tmp_path / "w.yaml"
    path.write_text(workload + f"output: {tmp_path / 'r'}\n"
                               "load: {mode: sessions, sessions: 2}\n")
    (done,) = run_workload(load_workload(path))
    requests = pd.read_parquet(done.path / "requests.parquet")
    sessions = pd.read_parquet(done.path / "sessions.parquet")
    assert (requests["status"] == "finished").all() and len(requests) == 62
    assert sorted(sessions["turns"]) == [3, 3, 3, 53]
    assert requests.groupby("turn")["prefix_hit_tokens"].sum().iloc[1:].sum() > 0
    open_loop = tmp_path / "open.parquet"  # the turns at the arrivals the run recorded
    assert main(["trace", "convert", str(WEKA), str(open_loop), "--arrivals",
                 str(done.path)]) == 0
    assert sorted(read_trace(open_loop).df["arrival_s"]) == pytest.approx(
        sorted(requests["arrival_s"] - requests["arrival_s"].min()))
