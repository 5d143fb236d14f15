"""Session traces (harness/traces/sessions.py, session_gen.py): prompts grow by the
parent's prompt and output, hash ids chain the shared context, a generated trace is the
same for a seed, and a bad tree is refused naming the file, the line and the session."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.commands import main
from harness.traces.generate import fixed, uniform
from harness.traces.read import TraceError
from harness.traces.session_gen import Fanout, Shape, gap_dist, generate_sessions
from harness.traces.sessions import read_sessions

pytestmark = pytest.mark.core
REPO = Path(__file__).resolve().parents[1]


def turn(sid, k, parent, *, gap=0.0, kind="tool", new=10, out=5, at=0.0, **extra):
    return dict(session_id=sid, turn=k, parent=parent, arrival_s=at, gap_s=gap,
                gap_kind=kind, input_tokens=new, max_new_tokens=out, **extra)


def write(tmp_path, rows, name="s.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_turns_prompt_is_its_parents_prompt_and_output_and_its_input(tmp_path):
    df = read_sessions(write(tmp_path, [turn(7, 0, -1, new=100, out=20, at=5.0),
                                        turn(7, 1, 0, gap=2.0, new=30, out=4),
                                        turn(7, 2, 1, gap=1.0, kind="user", new=6)]))
    assert df["prompt_len"].tolist() == [100, 100 + 20 + 30, 150 + 4 + 6]
    assert df["parent_row"].tolist() == [-1, 0, 1]
    assert df["arrival_s"].tolist() == [0.0, 0.0, 0.0]  # the session's start, from 0


def test_sessions_are_ordered_by_start_their_turns_by_file_order(tmp_path):
    df = read_sessions(write(tmp_path, [turn(1, 0, -1, at=9.0), turn(2, 0, -1, at=3.0),
                                        turn(1, 1, 0), turn(2, 1, 0)]))
    assert df["session_id"].tolist() == [2, 2, 1, 1]
    assert df["arrival_s"].tolist() == [0.0, 0.0, 6.0, 6.0]
    assert df["parent_row"].tolist() == [-1, 0, -1, 2]


def test_a_csv_session_trace_reads_as_the_jsonl_one(tmp_path):
    rows = [turn(0, 0, -1, new=40), turn(0, 1, 0, gap=1.5, new=8)]
    csv = tmp_path / "s.csv"
    csv.write_text(",".join(rows[0]) + "\n"
                   + "".join(",".join(str(v) for v in r.values()) + "\n" for r in rows))
    a, b = read_sessions(csv), read_sessions(write(tmp_path, rows))
    assert a.equals(b)


def test_chained_hash_ids_share_the_parents_context_and_no_more(tmp_path):
    # blocks of 4: root 10 tokens (2 full blocks), output 5: its context is 15 tokens, 3
    # full blocks; the two sub-agents and the next turn share those 3, then differ
    df = read_sessions(write(tmp_path, [turn(0, 0, -1, new=10, out=5),
                                        turn(0, 1, 0, kind="subagent", new=3),
                                        turn(0, 2, 0, kind="subagent", new=3),
                                        turn(0, 3, 0, new=3)]), hash_block_size=4)
    ids = df["hash_ids"].tolist()
    assert [len(i) for i in ids] == [3, 5, 5, 5]  # ceil(10/4), ceil(18/4)
    for child in ids[1:]:
        assert child[:3] == ids[1][:3] and child[:2] == ids[0][:2]
        assert child[3] != ids[0][2]  # the root's partial last block is not the context's
    assert len({c[3] for c in ids[1:]}) == 3


def test_hash_ids_in_the_file_must_fit_the_prompts(tmp_path):
    good = [turn(0, 0, -1, new=8, out=4, hash_ids=[1, 2]),
            turn(0, 1, 0, new=4, hash_ids=[1, 2, 3, 4])]
    assert read_sessions(write(tmp_path, good), hash_block_size=4)["hash_ids"].tolist() \
        == [[1, 2], [1, 2, 3, 4]]
    short = [good[0], turn(0, 1, 0, new=4, hash_ids=[1, 2, 3])]
    with pytest.raises(TraceError, match=r"s.jsonl:2: session 0: turn 1: hash_ids: 3 ids, "
                                         r"but its 16-token prompt has 4 blocks"):
        read_sessions(write(tmp_path, short), hash_block_size=4)
    other = [good[0], turn(0, 1, 0, new=4, hash_ids=[1, 9, 3, 4])]
    with pytest.raises(TraceError, match=r"s.jsonl:2: session 0: .*not its parent's"):
        read_sessions(write(tmp_path, other), hash_block_size=4)


def test_a_recorded_prompt_is_taken_as_recorded_and_shares_what_its_ids_say(tmp_path):
    # blocks of 4: the root's 10-token prompt and 6 output tokens; turn 1 compacts them to
    # 7 tokens, one block shared (id 1); turn 2 extends turn 1 by 3 tokens; turn 3, a
    # sub-agent, has its own 5-token system prompt
    rows = [turn(0, 0, -1, new=10, out=6, prompt_tokens=10, hash_ids=[1, 2, 3]),
            turn(0, 1, 0, new=1, out=2, prompt_tokens=7, hash_ids=[1, 4]),
            turn(0, 2, 1, new=3, prompt_tokens=12, hash_ids=[1, 5, 6]),
            turn(0, 3, 0, kind="subagent", new=5, prompt_tokens=5, hash_ids=[7, 8])]
    df = read_sessions(write(tmp_path, rows), hash_block_size=4)
    assert df["prompt_len"].tolist() == [10, 7, 12, 5]
    assert df["input_tokens"].tolist() == [10, 1, 3, 5]  # as stated, for statistics
    assert df["parent_row"].tolist() == [-1, 0, 1, 0]
    assert df["hash_ids"].tolist() == [r["hash_ids"] for r in rows]


@pytest.mark.parametrize("rows, message", [
    ([turn(2, 0, -1, prompt_tokens=10, hash_ids=[1, 2, 3]), turn(2, 1, 0, hash_ids=[1, 2])],
     r":2: session 2: prompt_tokens on some turns only: give them on every turn or on none"),
    ([turn(2, 0, -1), turn(2, 1, 0, prompt_tokens=7)],
     r":2: session 2: prompt_tokens on some turns only"),
    ([turn(2, 0, -1, prompt_tokens=10), turn(2, 1, 0, prompt_tokens=7)],
     r":1: session 2: prompt_tokens without hash_ids"),
    ([turn(2, 0, -1, prompt_tokens=10, hash_ids=[1, 2, 3]),
      turn(2, 1, 0, prompt_tokens=7, hash_ids=[1, 4, 5])],
     r":2: session 2: turn 1: hash_ids: 3 ids, but its 7-token prompt has 2 blocks of 4"),
    ([turn(2, 0, -1, prompt_tokens=0, hash_ids=[])],
     r":1: session 2: prompt_tokens: expected an integer >= 1, got 0"),
])
def test_recorded_prompts_are_refused_where_inconsistent(tmp_path, rows, message):
    with pytest.raises(TraceError, match=r"s\.jsonl" + message):
        read_sessions(write(tmp_path, rows), hash_block_size=4)


def test_trace_stats_exits_2_on_a_recorded_prompt_its_ids_do_not_fit(tmp_path, capsys):
    rows = [turn(4, 0, -1, prompt_tokens=10, hash_ids=[1, 2, 3]),
            turn(4, 1, 0, prompt_tokens=20, hash_ids=[1, 2, 3])]
    path = write(tmp_path, rows)
    assert main(["trace", "stats", str(path), "--hash-block-size", "4"]) == 2
    assert f"{path}:2: session 4: turn 1: hash_ids: 3 ids, but its 20-token prompt has 5 " \
        in capsys.readouterr().err
    rows[1]["hash_ids"] += [4, 5]
    write(tmp_path, rows)
    assert main(["trace", "stats", str(path), "--hash-block-size", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prompt_len"]["max"] == 20


@pytest.mark.parametrize("rows, message", [
    ([turn(3, 0, -1), turn(3, 1, 5)], r":2: session 3: turn 1's parent, turn 5, is missing"),
    ([turn(3, 0, -1), turn(3, 1, 2), turn(3, 2, 0)],
     r":2: session 3: turn 1's parent, turn 2, comes later"),
    ([turn(3, 0, -1), turn(3, 1, 1)], r":2: session 3: turn 1 is its own parent: a cycle"),
    ([turn(3, 0, -1), turn(3, 2, 1), turn(3, 1, 2)],
     r":2: session 3: turn 2's parent, turn 1, comes later"),
    ([turn(3, 0, -1), turn(3, 0, -1)], r":2: session 3: turn 0 given twice"),
    ([turn(3, 0, -1), turn(3, 1, 0), turn(3, 2, 0)], r":3: session 3: turn 0 has two next"),
    ([turn(3, 0, -1, kind="nap")], r":1: session 3: gap_kind: expected one of tool"),
    ([turn(3, 0, -1, new=0)], r":1: session 3: input_tokens: expected an integer >= 1"),
])
def test_a_bad_tree_is_refused_naming_file_line_and_session(tmp_path, rows, message):
    with pytest.raises(TraceError, match=r"s\.jsonl" + message):
        read_sessions(write(tmp_path, rows))


def generated(arrival_seed=1, length_seed=2, **kw):
    shape = dict(turns=uniform(2, 6), system_prompt=1000, input=uniform(10, 200),
                 output=uniform(5, 50), tool_gap=gap_dist({"exponential": {"mean_s": 2.0}}),
                 user_gap=gap_dist({"lognormal": {"median_s": 10.0, "sigma": 1.0}}),
                 fanout=Fanout(0.3, 2, 2))
    return generate_sessions(20, Shape(**{**shape, **kw}), block_size=16,
                             arrival_seed=arrival_seed, length_seed=length_seed)


def test_a_generated_trace_is_the_same_for_a_seed_and_another_for_another():
    a, b, c = generated(), generated(), generated(length_seed=3)
    assert a.equals(b) and not a.equals(c)
    assert generated(arrival_seed=9)["prompt_len"].equals(a["prompt_len"])


def test_generated_sessions_share_the_system_prompt_and_grow_their_context():
    df = generated()
    assert df["session_id"].nunique() == 20 and (df["gap_kind"] == "subagent").any()
    roots = df[df["parent_row"] < 0]
    assert (roots["prompt_len"] >= 1000 + 10).all()
    shared = 1000 // 16
    assert len({tuple(ids[:shared]) for ids in roots["hash_ids"]}) == 1
    child = df[df["parent_row"] >= 0]
    parent = df.loc[child["parent_row"].to_numpy()]
    assert (child["prompt_len"].to_numpy() == parent["prompt_len"].to_numpy()
            + parent["max_new_tokens"].to_numpy() + child["input_tokens"].to_numpy()).all()
    assert np.all(np.diff(df["arrival_s"].to_numpy()) >= 0)


def test_a_fixed_gap_and_no_fanout_make_a_chain():
    df = generated(turns=fixed(3), fanout=Fanout(), tool_gap=gap_dist({"fixed": 1.5}),
                   tool_share=1.0)
    assert (df.groupby("session_id").size() == 3).all()
    assert (df.loc[df["parent_row"] >= 0, "gap_s"] == 1.5).all()


@pytest.mark.parametrize("spec", [{"fixed": -1}, {"exponential": {"mean": 1}}, {"gamma": 1},
                                  {"lognormal": {"median_s": 0, "sigma": 1}}])
def test_a_bad_gap_distribution_is_refused(spec):
    with pytest.raises(TraceError):
        gap_dist(spec)


def test_trace_stats_counts_sessions_and_their_starts(tmp_path, capsys):
    path = write(tmp_path, [turn(0, 0, -1, at=0.0), turn(0, 1, 0, gap=2.0),
                            turn(1, 0, -1, at=4.0), turn(1, 1, 0, kind="subagent", gap=1.0),
                            turn(1, 2, 0, kind="user", gap=5.0)])
    assert main(["trace", "stats", str(path), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["source"] == "sessions" and s["requests"] == 5
    assert s["duration_s"] == 4.0 and s["mean_rate"] == 0.25  # of the sessions' starts
    assert s["sessions"] == dict(sessions=2, turns_mean=2.5, turns_max=3, subagent_turns=1,
                                 gap_s_mean=dict(subagent=1.0, tool=2.0, user=5.0))
    assert main(["trace", "convert", str(path), str(tmp_path / "o.csv")]) == 2
    assert "a session trace converts to no request trace" in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()


def test_a_roots_gap_may_be_left_out_but_not_its_start(tmp_path):
    root = {k: v for k, v in turn(0, 0, -1).items() if k != "gap_s"}
    assert read_sessions(write(tmp_path, [root]))["gap_s"].tolist() == [0.0]
    del root["arrival_s"]
    with pytest.raises(TraceError, match=r"s\.jsonl:1: session 0: arrival_s: expected a "
                                         r"number of seconds >= 0, got None"):
        read_sessions(write(tmp_path, [root]))
    child = {k: v for k, v in turn(0, 1, 0).items() if k != "gap_s"}
    with pytest.raises(TraceError, match=r"s\.jsonl:2: session 0: gap_s"):
        read_sessions(write(tmp_path, [turn(0, 0, -1), child]))


def test_the_bundled_trace_is_its_recipe_generated_again(tmp_path):
    """workloads/README.md's recipe writes workloads/traces/agentic_sessions.csv byte for
    byte: the generator draws as it did, and the frame's gap_kind is categorical."""
    readme = (REPO / "workloads" / "README.md").read_text()
    recipe = readme.split("## traces/agentic_sessions.csv")[1].split("```python\n")[1]
    recipe = recipe.split("```")[0]
    spec = "\n".join(line[2:] for line in recipe.splitlines()
                     if line.startswith("# ") and "/tmp/gen.yaml" not in line)
    (tmp_path / "gen.yaml").write_text(spec)
    out = tmp_path / "agentic_sessions.csv"
    code = recipe.replace("/tmp/gen.yaml", str(tmp_path / "gen.yaml"))
    namespace: dict = {}
    exec(code.replace('"workloads/traces/agentic_sessions.csv"', repr(str(out))), namespace)
    assert isinstance(namespace["df"]["gap_kind"].dtype, pd.CategoricalDtype)
    assert out.read_bytes() == (REPO / "workloads" / "traces" / "agentic_sessions.csv").read_bytes()
