"""A session trace sent to an endpoint (harness/replay/client_sessions.py): against
`steptrace serve` each turn is sent once its parent's stream has ended plus its gap, a next
turn once every sub-agent has ended, a closed loop keeps its sessions' turns apart; its
prompt is its parent's as sent, the output received and its own input (ids, or the chat
conversation); a failed turn ends as a rejected one does, its session going on."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiohttp")

from aiohttp import web  # noqa: E402

from harness.record.run import Run  # noqa: E402
from harness.replay.prompts import WORDS  # noqa: E402
from tests.serving import ONE_TOKEN_EVENTS, aiohttp_endpoint, client_run, served  # noqa: E402


def turn(sid, k, parent, *, gap=0.0, kind="tool", new=10, out=4, at=0.0):
    return dict(session_id=sid, turn=k, parent=parent, arrival_s=at, gap_s=gap,
                gap_kind=kind, input_tokens=new, max_new_tokens=out)


def session_trace(tmp_path: Path, turns) -> str:
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    return "trace: {file: s.jsonl}\n"


def rows_of(run: Run) -> pd.DataFrame:
    return run.table("requests").set_index(["session_id", "turn"]).sort_index()


# a two-turn session; a root whose two sub-agents (one of two turns) its next turn waits for
TURNS = [turn(0, 0, -1, new=20, out=6), turn(0, 1, 0, gap=0.3, new=10, out=4),
         turn(1, 0, -1, new=30, out=3, at=0.05),
         turn(1, 1, 0, gap=0.1, kind="subagent", new=8, out=5),
         turn(1, 2, 1, gap=0.05, new=4, out=2),
         turn(1, 3, 0, gap=0.2, kind="subagent", new=6, out=2),
         turn(1, 4, 0, gap=0.1, kind="user", new=5, out=3)]


def test_against_serve_each_turn_is_sent_after_what_it_waits_for(tmp_path):
    (tmp_path / "server").mkdir()
    with served(tmp_path / "server", text=ONE_TOKEN_EVENTS) as (url, runs):
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny}}',
                         session_trace(tmp_path, TURNS))
    r = rows_of(run)
    assert run.complete and (r["status"] == "finished").all()
    assert (r["output_tokens"] == r["max_new_tokens"]).all()
    end, sent, arrival = r["last_token_s"], r["enqueue_s"], r["arrival_s"]
    # sent at its arrival: its parent's stream's end (after its last token) plus its gap
    assert sent[0, 1] >= arrival[0, 1] >= end[0, 0] + 0.3
    assert arrival[1, 1] >= end[1, 0] + 0.1 and arrival[1, 3] >= end[1, 0] + 0.2
    assert arrival[1, 2] >= end[1, 1] + 0.05
    assert arrival[1, 4] >= max(end[1, 0], end[1, 2], end[1, 3]) + 0.1  # the join
    assert (sent >= arrival).all() and (sent - arrival < 0.1).all()
    assert arrival[0, 0] < 0.05 and 0.05 <= arrival[1, 0] < 0.1
    # each prompt its parent's, the output it received and its own input; the server's too
    assert r["prompt_len"].tolist() == [20, 36, 30, 41, 50, 39, 38]
    served_lens = sorted(runs[0].table("requests")["prompt_len"].tolist())
    assert served_lens == sorted(r["prompt_len"].tolist())
    sessions = run.table("sessions").set_index("session_id").sort_index()
    assert sessions["turns"].tolist() == [2, 5] and sessions["subagent_turns"].tolist() == [0, 3]
    assert sessions["finished_turns"].tolist() == [2, 5]
    assert sessions.loc[1, "end_s"] == end[1].max()
    assert sessions.loc[0, "start_s"] == arrival[0, 0]
    # an endpoint's prefix hits are unknown, not none
    assert (sessions["prefix_hit_tokens"] == -1).all()
    assert np.isnan(run.value("session_prefix_hit.later_turns"))
    assert run.value("ttft_prefix_miss.count") == 0


def test_a_closed_loop_keeps_each_sessions_turns_apart(tmp_path):
    turns = [t for s in range(4) for t in (turn(s, 0, -1, new=12, out=8),
                                           turn(s, 1, 0, gap=0.02, new=4, out=8))]
    (tmp_path / "server").mkdir()
    with served(tmp_path / "server", text=ONE_TOKEN_EVENTS) as (url, _):
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny, api: chat}}',
                         session_trace(tmp_path, turns) + "load: {mode: sessions, sessions: 2}\n")
    r = rows_of(run).reset_index()
    assert (r["status"] == "finished").all()
    span = r.groupby("session_id").agg(start=("arrival_s", "min"), end=("last_token_s", "max"))
    live = [((span["start"] <= t) & (span["end"] > t)).sum() for t in span["start"]]
    assert max(live) == 2 and (span["start"].sort_values().iloc[:2] == 0).all()
    for _, s in r.groupby("session_id"):
        assert s["arrival_s"].iloc[1] >= s["last_token_s"].iloc[0] + 0.02


@contextmanager
def recording_endpoint(bodies: list, chat: bool):
    """An endpoint that records each body and streams max_tokens events of " tok", a
    500 for max_tokens 1."""
    async def complete(request):
        body = await request.json()
        bodies.append(body)
        if body["max_tokens"] == 1:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        choice = {"index": 0, "delta": {"content": " tok"}} if chat else \
            {"index": 0, "text": " tok"}
        for _ in range(body["max_tokens"]):
            await response.write(b"data: " + json.dumps({"choices": [choice]}).encode()
                                 + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    path = "/v1/chat/completions" if chat else "/v1/completions"
    with aiohttp_endpoint([web.post(path, complete)]) as url:
        yield url


def sent(tmp_path, turns, api):
    bodies: list = []
    with recording_endpoint(bodies, api == "chat") as url:
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: m, api: {api}}}',
                         session_trace(tmp_path, turns))
    return run, bodies


def test_a_completions_prompt_is_the_parents_ids_its_output_and_its_input(tmp_path):
    run, bodies = sent(tmp_path, [turn(0, 0, -1, new=20, out=6),
                                  turn(0, 1, 0, gap=0.05, new=10, out=4),
                                  turn(0, 2, 1, gap=0.05, new=3, out=2)], "completions")
    first, second, third = (b["prompt"] for b in bodies)
    assert [len(p) for p in (first, second, third)] == [20, 36, 43]
    assert second[:20] == first and third[:36] == second
    assert second[20:26] != first[:6]  # the output's ids, then the turn's own
    assert rows_of(run)["prompt_len"].tolist() == [20, 36, 43]


def test_a_chat_prompt_is_the_conversation(tmp_path):
    run, bodies = sent(tmp_path, [turn(0, 0, -1, new=5, out=3),
                                  turn(0, 1, 0, gap=0.05, new=4, out=2),
                                  turn(0, 2, 0, gap=0.05, kind="subagent", new=2, out=2)],
                       "chat")
    root, sub, nxt = sorted(bodies, key=lambda b: (len(b["messages"]),
                                                   len(b["messages"][-1]["content"].split())))
    assert [m["role"] for m in root["messages"]] == ["user"]
    assert len(root["messages"][0]["content"].split()) == 5
    for child, words in ((nxt, 4), (sub, 2)):
        assert child["messages"][:1] == root["messages"]
        assert child["messages"][1] == {"role": "assistant", "content": " tok" * 3}
        assert child["messages"][2]["role"] == "user"
        assert len(child["messages"][2]["content"].split()) == words
        assert set(child["messages"][2]["content"].split()) <= set(WORDS)
    assert rows_of(run)["prompt_len"].tolist() == [5, 12, 10]


def test_a_failed_turn_ends_there_and_its_session_goes_on(tmp_path):
    run, bodies = sent(tmp_path, [turn(0, 0, -1, new=8, out=1),
                                  turn(0, 1, 0, gap=0.05, new=4, out=3)], "completions")
    r = rows_of(run)
    assert r["status"].tolist() == ["rejected", "finished"]
    assert r["reason"].iloc[0].startswith("HTTP 500")
    # sent after the failure, its prompt the parent's and no output: none was received
    assert r["arrival_s"].iloc[1] >= r["enqueue_s"].iloc[0] + 0.05
    assert bodies[1]["prompt"][:8] == bodies[0]["prompt"] and len(bodies[1]["prompt"]) == 12
    assert r["prompt_len"].tolist() == [8, 12]
    sessions = run.table("sessions")
    assert sessions["turns"].tolist() == [2] and sessions["finished_turns"].tolist() == [1]
    assert np.isfinite(sessions["end_s"]).all()


def test_a_recorded_prompt_is_sent_as_the_trace_has_it(tmp_path):
    """A trace with prompt_tokens (a compacted context: the second call's prompt shorter
    than the first's) sends each turn's recorded prompt, its shared blocks the same ids."""
    turns = [dict(turn(0, 0, -1, new=40, out=3), prompt_tokens=40, hash_ids=[1, 2, 3]),
             dict(turn(0, 1, 0, gap=0.05, new=4, out=2), prompt_tokens=20, hash_ids=[1, 9])]
    session_trace(tmp_path, turns)
    (tmp_path / "server").mkdir()
    with served(tmp_path / "server", text=ONE_TOKEN_EVENTS) as (url, runs):
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny}}',
                         "trace: {file: s.jsonl, hash_block_size: 16}\n")
    r = rows_of(run)
    assert run.complete and (r["status"] == "finished").all()
    assert r["prompt_len"].tolist() == [40, 20]
    server = runs[0].table("requests").sort_values("request_id")
    assert server["prompt_len"].tolist() == [40, 20]
    assert server["prefix_hit_tokens"].tolist() == [0, 16]  # the shared block's tokens
