"""A run against an endpoint (the workload's `target`, harness/replay/client.py): against
`steptrace serve` in this process it reproduces the served run's requests, its latencies
the server's plus the network's; a closed loop keeps its window; every fault is recorded
with its status and reason, and the run goes on; a bad target is refused, naming its key."""

from __future__ import annotations

import asyncio
import json
import socket
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiohttp")

from aiohttp import web  # noqa: E402

from harness.commands import main  # noqa: E402
from harness.record.run import Run  # noqa: E402
from tests.serving import (  # noqa: E402
    ONE_TOKEN_EVENTS,
    TPOT_SLACK_S,
    TTFT_SLACK_S,
    aiohttp_endpoint,
    client_run,
    served,
)


def server_dir(tmp_path: Path) -> Path:
    (tmp_path / "server").mkdir()
    return tmp_path / "server"


def requests_of(run: Run) -> pd.DataFrame:
    return run.table("requests").sort_values("request_id").reset_index(drop=True)


@pytest.mark.slow
def test_against_serve_it_reproduces_the_served_requests_within_the_network(tmp_path):
    trace = ("trace:\n  generate: {requests: 16, rate: 10, arrival: constant, "
             "prompt: {uniform: [8, 64]}, output: {uniform: [2, 24]}}\n")
    with served(server_dir(tmp_path), text=ONE_TOKEN_EVENTS) as (url, runs):
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny}}', trace)
    mine, theirs = requests_of(run), requests_of(runs[0])
    assert run.complete and run.manifest.target["tables"].startswith("requests, server")
    assert not (run.path / "steps.parquet").exists()
    assert (mine["status"] == "finished").all() and len(theirs) == len(mine) == 16
    # one request at a time (100 ms apart): the server took them in the trace's order
    assert mine["output_tokens"].tolist() == theirs["output_tokens"].tolist() \
        == mine["max_new_tokens"].tolist()
    assert mine["prompt_len"].tolist() == theirs["prompt_len"].tolist()
    extra = mine["ttft_s"] - theirs["ttft_s"]
    assert (extra > 0).all() and (extra < TTFT_SLACK_S).all(), extra.tolist()
    tpot = (mine["tpot_s"] - theirs["tpot_s"]).dropna()
    assert (tpot.abs() < TPOT_SLACK_S).all(), tpot.tolist()
    # a gap per token after the first: one token per event
    assert run.value("itl.count") == (mine["output_tokens"] - 1).sum()
    for unknown in ("dp_rank", "preemptions", "prefix_hit_tokens"):
        assert (mine[unknown] == -1).all()
    assert mine["first_scheduled_s"].isna().all()
    lag = run.manifest.target["send_lag_s"]
    assert 0 <= lag["p50"] <= lag["max"] < 0.5 and lag["count"] == 16


def test_a_closed_loop_keeps_at_most_its_window_in_flight(tmp_path):
    trace = ("trace:\n  generate: {requests: 12, rate: 1000, prompt: {fixed: 16}, "
             "output: {fixed: 40}}\nload: {mode: concurrency, concurrency: 3}\n")
    with served(server_dir(tmp_path), text=ONE_TOKEN_EVENTS) as (url, _):
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny, api: chat}}', trace)
    r = requests_of(run)
    assert (r["status"] == "finished").all() and (r["output_tokens"] == 40).all()
    times = np.concatenate([r["arrival_s"], r["last_token_s"]])
    steps = np.concatenate([np.ones(len(r)), -np.ones(len(r))])
    order = np.lexsort((steps, times))  # an end before a start at the same instant
    in_flight = np.cumsum(steps[order])
    assert in_flight.max() == 3
    # a request arrives when it is released, and is sent then
    assert (r["arrival_s"].iloc[:3] < 0.1).all() and (r["schedule_fidelity_s"] < 0.1).all()


@contextmanager
def faulty_server(seen: list):
    """An endpoint whose reply is chosen by max_tokens: 1 a 500, 2 a malformed event, 3 a
    stream that ends without [DONE], 4 a good stream of 4 events, 5 a redirect to another
    host, 6 a stream that stalls."""
    async def completions(request):
        seen.append(request.headers.get("Authorization"))
        body = await request.json()
        kind = body["max_tokens"]
        if kind == 1:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if kind == 5:
            raise web.HTTPFound("http://elsewhere.invalid/v1/completions")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"choices": [{"index": 0, "text": " tok"}]}
        if kind == 2:
            await response.write(b"data: {not json\n\n")
        elif kind == 6:
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await asyncio.sleep(5)
        else:
            for _ in range(4):
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if kind == 4:
                usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
                await response.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
                await response.write(b"data: [DONE]\n\n")
        return response

    with aiohttp_endpoint([web.post("/v1/completions", completions)]) as url:
        yield url


@pytest.mark.slow
def test_every_fault_is_recorded_with_its_status_and_reason(tmp_path, monkeypatch, capsys):
    (tmp_path / "faults.csv").write_text(
        "arrival_s,prompt_len,max_new_tokens\n" +
        "".join(f"{0.05 * k},3,{k}\n" for k in range(1, 7)))
    monkeypatch.setenv("STEPTRACE_TEST_KEY", "sekrit-value")
    seen: list = []
    with faulty_server(seen) as url:
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: m, timeout_s: 1, '
                                   f'api_key_env: STEPTRACE_TEST_KEY}}',
                         "trace: {file: faults.csv}\n")
    r = requests_of(run)
    said = list(zip(r["status"], r["reason"]))
    assert said[0][0] == "rejected" and said[0][1].startswith("HTTP 500")
    assert said[1][0] == "unfinished" and said[1][1].startswith("malformed event")
    assert said[2] == ("unfinished", "the stream ended before [DONE]")
    assert said[3] == ("finished", "")
    assert said[4][0] == "rejected" and "elsewhere.invalid" in said[4][1] \
        and "not followed" in said[4][1]
    assert said[5][0] == "unfinished" and said[5][1].startswith("timed out")
    assert r["output_tokens"].tolist() == [0, 0, 4, 4, 0, 1]
    assert run.complete and run.value("requests.finished") == 1
    assert seen == ["Bearer sekrit-value"] * 6
    assert "sekrit" not in (run.path / "manifest.json").read_text()
    # read as any run; the exact gate does not apply, the rules do
    capsys.readouterr()
    assert main(["show", str(run.path)]) == 0
    assert main(["report", str(run.path), "-o", str(tmp_path / "report")]) == 0
    assert main(["gate", str(run.path), "--baseline", str(run.path)]) == 2
    assert "exact gate does not apply" in capsys.readouterr().err
    rules = tmp_path / "rules.yaml"
    rules.write_text("ttft.p99: {max_increase: 50%}\n")
    assert main(["gate", str(run.path), "--baseline", str(run.path), "--rules",
                 str(rules)]) == 0


def test_a_refused_connection_is_recorded_and_the_run_goes_on(tmp_path):
    with socket.socket() as s:  # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = client_run(tmp_path, f'{{endpoint: "http://127.0.0.1:{port}/v1", model: m}}',
                     "trace:\n  generate: {requests: 3, rate: 50}\n")
    r = requests_of(run)
    assert run.complete and (r["status"] == "rejected").all()
    assert r["reason"].str.startswith("cannot connect").all()
    assert r["enqueue_s"].notna().all() and r["ttft_s"].isna().all()


@pytest.mark.parametrize("target, key", [
    ('{endpoint: "ftp://127.0.0.1/", model: m}', "target.endpoint"),
    ('{endpoint: "file:///etc/passwd", model: m}', "target.endpoint"),
    ('{endpoint: "http://user:pw@127.0.0.1/", model: m}', "target.endpoint"),
    ('{endpoint: "http://127.0.0.1:8000"}', "target.model"),
    ('{model: m}', "target.endpoint"),
    ('{endpoint: "http://127.0.0.1:8000", model: m, api: grpc}', "target.api"),
    ('{endpoint: "http://127.0.0.1:8000", model: m, api_key_env: "A-B"}',
     "target.api_key_env"),
])
def test_a_bad_target_exits_2_naming_the_key(tmp_path, capsys, target, key):
    path = tmp_path / "bad.yaml"
    path.write_text(f"trace:\n  generate: {{requests: 2}}\ntarget: {target}\n"
                    f"output: {tmp_path / 'results'}\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f": {key}: " in err, err
    assert not (tmp_path / "results").exists()
