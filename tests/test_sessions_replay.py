"""Sessions replayed (harness/replay/sessions.py) on a modeled engine's virtual clock,
checked by hand: a turn arrives at its parent's last token plus its gap, a next turn after
every sub-agent, a closed loop's sessions one at a time never overlap their own turns, and
prefix hits stay within each turn's shared context."""

import json

import numpy as np
import pandas as pd
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig, _core
from harness.record.sessions_table import session_rows
from harness.replay.driver import Requests, replay
from harness.traces.generate import uniform
from harness.traces.session_gen import Fanout, Shape, gap_dist, generate_sessions
from harness.traces.sessions import read_sessions

pytestmark = pytest.mark.core

BLOCK = 16


class LogRecorder:
    """What the replay needs of a Recorder, over a bare StepLog."""

    def __init__(self, n: int) -> None:
        self.log = _core.StepLog(0, 1 << 20, lambda: None)
        self.enqueue, self.step = self.log.enqueue, self.log.record
        self.arrival_s = np.full(n, np.nan)

    @property
    def num_done(self) -> int:
        return self.log.num_done

    def arrived(self, i: int, t: float) -> None:
        self.arrival_s[i] = t

    def requests(self) -> pd.DataFrame:
        self.log.end()
        rows = pd.DataFrame(self.log.take_requests()).sort_values("request_id")
        return rows.set_index("request_id").assign(arrival_s=self.arrival_s)


def replayed(df, live=None):
    engine = LLMEngine(EngineConfig(
        scheduler=SchedulerConfig(num_kv_blocks=8192, block_size=BLOCK),
        model="deepseek-v3", executor="modeled:H200"))
    recorder = LogRecorder(len(df))
    requests = Requests.of(df, df.attrs.get("hash_block_size"), live_sessions=live)
    assert replay(engine, requests, "virtual", recorder)
    engine.close()
    return recorder.requests()


def turn(sid, k, parent, *, gap=0.0, kind="tool", new=100, out=8, at=0.0):
    return dict(session_id=sid, turn=k, parent=parent, arrival_s=at, gap_s=gap,
                gap_kind=kind, input_tokens=new, max_new_tokens=out)


def sessions(tmp_path, rows):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_sessions(path, hash_block_size=BLOCK)


def test_a_second_turn_arrives_at_the_first_ones_last_token_plus_its_gap(tmp_path):
    df = sessions(tmp_path, [turn(0, 0, -1, new=500, out=20, at=1.0),
                             turn(0, 1, 0, gap=3.25, new=40)])
    rows = replayed(df)
    assert rows.loc[0, "arrival_s"] == 0.0
    assert rows.loc[1, "arrival_s"] == rows.loc[0, "last_token_s"] + 3.25
    assert df["prompt_len"].tolist() == [500, 560]
    assert rows["output_tokens"].tolist() == [20, 8]


def test_a_compacted_turn_is_replayed_as_recorded(tmp_path):
    # the root's 160-token prompt (10 blocks) and 20 output tokens; its next turn's recorded
    # prompt is 70 tokens (5 blocks), the root's first 3 blocks and 2 of its own
    rows = [turn(0, 0, -1, new=160, out=20), turn(0, 1, 0, gap=2.5, new=1)]
    rows[0].update(prompt_tokens=160, hash_ids=list(range(1, 11)))
    rows[1].update(prompt_tokens=70, hash_ids=[1, 2, 3, 100, 101])
    df = sessions(tmp_path, rows)
    prompt = Requests.of(df, BLOCK).prompt_len  # what the engine is given
    assert prompt.tolist() == [160, 70]
    done = replayed(df).assign(prompt_len=prompt)
    assert done.loc[1, "arrival_s"] == done.loc[0, "last_token_s"] + 2.5
    assert done.loc[1, "prefix_hit_tokens"] == 3 * BLOCK  # the shared leading ids, no more
    table = session_rows(done, df)
    assert table[["prompt_tokens", "prefix_hit_tokens", "output_tokens"]].values.tolist() \
        == [[230, 3 * BLOCK, 28]]


def test_a_next_turn_waits_for_every_sub_agent(tmp_path):
    # turn 0 fans out to sub-agents 1 (one turn) and 2 (two turns: 2, 3); 4 is 0's next
    df = sessions(tmp_path, [turn(0, 0, -1, out=4),
                             turn(0, 1, 0, gap=0.5, kind="subagent", out=4),
                             turn(0, 2, 0, gap=0.5, kind="subagent", out=30),
                             turn(0, 3, 2, gap=2.0, out=30),
                             turn(0, 4, 0, gap=1.0, kind="user")])
    rows = replayed(df)
    end = rows["last_token_s"]
    assert rows.loc[1, "arrival_s"] == rows.loc[2, "arrival_s"] == end[0] + 0.5
    assert rows.loc[3, "arrival_s"] == end[2] + 2.0
    assert rows.loc[4, "arrival_s"] == max(end[0], end[1], end[3]) + 1.0
    assert end[3] > end[1]  # the join waited for the longer sub-agent


def generated(n=12):
    shape = Shape(turns=uniform(2, 5), system_prompt=2048, input=uniform(50, 300),
                  output=uniform(4, 40), tool_gap=gap_dist({"exponential": {"mean_s": 0.2}}),
                  user_gap=gap_dist({"fixed": 0.5}), fanout=Fanout(0.3, 2, 2))
    return generate_sessions(n, shape, rate=50.0, block_size=BLOCK, arrival_seed=1,
                             length_seed=2)


def test_a_closed_loop_runs_that_many_sessions_at_a_time():
    df = generated()
    rows = replayed(df, live=2).join(df[["session_id"]])
    span = rows.groupby("session_id").agg(start=("arrival_s", "min"),
                                           end=("last_token_s", "max"))
    edges = sorted([(s, 1) for s in span["start"]] + [(e, -1) for e in span["end"]])
    live = np.cumsum([d for _, d in edges])
    assert live.max() == 2 and live[-1] == 0
    # a session's turns never overlap but where sub-agents run together
    for _, s in rows.join(df[["parent_row", "gap_kind"]]).groupby("session_id"):
        main = s[s["gap_kind"] != "subagent"].sort_values("arrival_s")
        chain = main[main["parent_row"].isin(main.index) | (main["parent_row"] < 0)]
        assert (chain["arrival_s"].to_numpy()[1:] >= chain["last_token_s"].to_numpy()[:-1]).all()


def test_prefix_hits_stay_within_each_turns_shared_context():
    df = generated()
    rows = replayed(df)
    assert rows["prefix_hit_tokens"].sum() > 0
    for i, r in df.iterrows():
        p = r["parent_row"]
        shared = 2048 if p < 0 else df.loc[p, "prompt_len"] + df.loc[p, "max_new_tokens"]
        bound = min(shared // BLOCK, (r["prompt_len"] - 1) // BLOCK) * BLOCK
        assert rows.loc[i, "prefix_hit_tokens"] <= bound
    later = df["parent_row"] >= 0
    assert (rows.loc[later, "prefix_hit_tokens"] > 0).all()


def test_an_open_loop_starts_sessions_at_the_traces_times():
    df = generated()
    rows = replayed(df)
    roots = df["parent_row"] < 0
    assert rows.loc[roots, "arrival_s"].tolist() == df.loc[roots, "arrival_s"].tolist()


def test_the_real_clock_waits_out_the_gap(tmp_path):
    df = sessions(tmp_path, [turn(0, 0, -1, out=4), turn(0, 1, 0, gap=0.2, new=20)])
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=1024,
                                                              block_size=BLOCK),
                                    model="deepseek-v3", executor="modeled:H200"))
    recorder = LogRecorder(len(df))
    assert replay(engine, Requests.of(df, BLOCK), "real", recorder)
    engine.close()
    rows = recorder.requests()
    assert rows.loc[1, "arrival_s"] == pytest.approx(rows.loc[0, "last_token_s"] + 0.2)
    assert rows.loc[1, "arrival_s"] <= rows.loc[1, "enqueue_s"] < rows.loc[1, "arrival_s"] + 0.1


def test_the_engine_is_told_each_sessions_end_once_after_its_last_turn():
    df = generated()
    engine = LLMEngine(EngineConfig(
        scheduler=SchedulerConfig(num_kv_blocks=8192, block_size=BLOCK, session_retention=True),
        model="deepseek-v3", executor="modeled:H200"))
    events = []
    add, end = engine.add_request, engine.end_session
    engine.add_request = lambda i, **kw: (events.append(("turn", int(df["session_id"][i]))),
                                          add(i, **kw))[1]
    engine.end_session = lambda s: (events.append(("end", s)), end(s))[1]
    requests = Requests.of(df, df.attrs.get("hash_block_size"))
    assert replay(engine, requests, "virtual", LogRecorder(len(df)))
    engine.close()
    ends = [s for kind, s in events if kind == "end"]
    assert sorted(ends) == sorted(set(df["session_id"]))
    for s in ends:  # no turn of a session arrives after its end
        assert events.index(("end", s)) > max(k for k, e in enumerate(events) if e == ("turn", s))
