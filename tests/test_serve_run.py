"""A served run as recorded: 32 concurrent streams each get the tokens they asked for and
appear in the requests table; SIGTERM stops `steptrace serve` with its tables written."""

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading

import pandas as pd
import pytest

pytest.importorskip("aiohttp")

from tests.helpers import REPO  # noqa: E402
from tests.serving import SERVED, events, get, post, served, words, workload_file  # noqa: E402

STREAMS = 32


async def _stream(session, url, i):
    """Request i: a prompt of i + 1 words, 3 + i tokens asked; the tokens streamed back
    (by text.py's rule) and the usage chunk's."""
    body = dict(prompt=" ".join(["w"] * (i + 1)), max_tokens=3 + i, stream=True,
                stream_options=dict(include_usage=True))
    tokens, usage = 0, None
    async with session.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200
        async for line in response.content:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[len(b"data: "):])
            if chunk["choices"]:
                tokens += words(chunk["choices"][0]["text"])
            usage = chunk.get("usage") or usage
    return tokens, usage


async def _streams(url):
    import aiohttp
    async with aiohttp.ClientSession() as session:
        return await asyncio.gather(*(_stream(session, url, i) for i in range(STREAMS)))


def test_concurrent_streams_get_what_they_asked_for_and_are_recorded(tmp_path):
    with served(tmp_path) as (url, runs):
        results = asyncio.run(_streams(url))
        metrics = get(url, "/metrics")[1].decode()
    for i, (tokens, usage) in enumerate(results):
        assert tokens == 3 + i
        assert usage == dict(prompt_tokens=i + 1, completion_tokens=3 + i,
                             total_tokens=4 + 2 * i)
    assert re.search(r'^steptrace:token_delivery_seconds_count\{[^}]*\} [1-9]', metrics, re.M)
    run = runs[0]
    assert run.complete and run.manifest.trace == "served"
    requests = pd.read_parquet(run.path / "requests.parquet").sort_values("prompt_len")
    assert len(requests) == STREAMS
    assert (requests["status"] == "finished").all()
    assert requests["prompt_len"].tolist() == [i + 1 for i in range(STREAMS)]
    assert requests["output_tokens"].tolist() == [3 + i for i in range(STREAMS)]
    assert (requests["max_new_tokens"] == requests["output_tokens"]).all()


def test_the_cpu_model_takes_token_ids_and_writes_the_tokens_it_sent(tmp_path):
    cpu = SERVED.replace("modeled:H200", "cpu") + "tokens: true\n"
    with served(tmp_path, text=cpu) as (url, runs):
        for prompt, max_tokens in (([3, 1, 4, 1, 5], 6), ("a b c", 2)):
            status, body = post(url, "/v1/completions", dict(prompt=prompt,
                                                             max_tokens=max_tokens))
            assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == max_tokens
    tokens = pd.read_parquet(runs[0].path / "tokens.parquet")
    assert tokens.groupby("request_id").size().to_dict() == {0: 6, 1: 2}
    requests = pd.read_parquet(runs[0].path / "requests.parquet")
    assert requests["prompt_len"].tolist() == [5, 3]


@pytest.mark.parametrize("device", ["modeled:H200", "cpu"])
def test_a_prompt_that_repeats_an_earlier_one_hits_its_cached_blocks(tmp_path, device):
    """Prefix caching keys a served prompt by its content: the second turn of a chat (the
    first's messages, its answer, a new message) and a token-id prompt extending an
    earlier one hit the earlier prompt's full blocks; an unrelated prompt hits nothing."""
    cached = SERVED.replace("modeled:H200", device)  # prefix caching is on by default
    first = [dict(role="system", content=" ".join(f"rule{k}" for k in range(40))),
             dict(role="user", content="hello there")]
    ids = list(range(1, 50))
    with served(tmp_path, text=cached) as (url, runs):
        for body in (dict(messages=first, max_tokens=2),
                     dict(messages=first + [dict(role="assistant", content=" tok tok"),
                                            dict(role="user", content="and now")],
                          max_tokens=2),
                     dict(messages=[dict(role="user", content="unrelated " * 40)],
                          max_tokens=2)):
            assert post(url, "/v1/chat/completions", body)[0] == 200
        for prompt in (ids, ids + [7, 7, 7]):
            assert post(url, "/v1/completions", dict(prompt=prompt, max_tokens=2))[0] == 200
        metrics = get(url, "/metrics")[1].decode()
    requests = pd.read_parquet(runs[0].path / "requests.parquet").sort_values("request_id")
    hits = requests["prefix_hit_tokens"].tolist()
    counted = dict(re.findall(r"^vllm:prefix_cache_(queries|hits)_total\{[^}]*\} (\d+)$",
                              metrics, re.M))
    assert counted == dict(queries=str(requests["prompt_len"].sum()), hits=str(sum(hits)))
    first_len = requests["prompt_len"].iloc[0]
    assert hits[0] == 0 and hits[1] == first_len // 16 * 16 and hits[2] == 0
    assert hits[3] == 0 and hits[4] == len(ids) // 16 * 16


def _listening(process, lines):
    """The url the server says it listens at, from its stderr (`lines` keeps them)."""
    for line in process.stderr:
        lines.append(line)
        match = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
        if match:
            threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()
            return match.group(1)
    raise AssertionError("".join(lines))


@pytest.mark.slow
def test_sigterm_stops_the_server_with_its_tables_written(tmp_path):
    workload = workload_file(tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "harness.commands", "serve",
                                str(workload), "--port", "0", "--json"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        url = _listening(process, lines)
        assert post(url, "/v1/completions", dict(prompt="a b", max_tokens=3))[0] == 200
        status, body = post(url, "/v1/chat/completions",
                            dict(messages=[dict(role="user", content="hi")], max_tokens=2,
                                 stream=True))
        assert status == 200 and events(body)[-1] == "[DONE]"
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, "".join(lines)
    result = json.loads(out)
    assert result["signal"] == "SIGTERM" and result["run"]["complete"]
    run_dir = tmp_path / "results" / "served"
    (folder,) = run_dir.iterdir()
    assert str(folder) == result["run"]["run_dir"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["trace"] == "served" and manifest["served"]["requests"] == 2
    for table in ("steps", "batches", "requests", "summary"):
        assert (folder / f"{table}.parquet").is_file()
    requests = pd.read_parquet(folder / "requests.parquet")
    assert requests["output_tokens"].tolist() == [3, 2]
    assert len(pd.read_parquet(folder / "steps.parquet")) > 0


RANKS = SERVED.replace("modeled:H200", "cpu") + "deployment: {devices: 2, attention: {dp: 2}}\n"


@pytest.mark.parametrize("text, said", [(None, "not a P/D deployment"),
                                        (RANKS, "not 2 engine processes")])
def test_a_pd_deployment_or_rank_processes_are_refused_saying_what_is_served(
        tmp_path, capsys, text, said):
    from harness.commands import main
    from tests.helpers import PD
    workload = workload_file(tmp_path, PD if text is None else text)
    assert main(["serve", str(workload), "--port", "0", "--json"]) == 2
    out, err = capsys.readouterr()
    assert said in err and "one co-located engine" in err
    assert json.loads(out)["exit_code"] == 2
    assert not (tmp_path / "results").exists()


def test_serve_has_help_and_refuses_a_bad_port(tmp_path, capsys):
    from harness.commands import main
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--help"])
    assert exited.value.code == 0 and "--max-concurrency" in capsys.readouterr().out
    assert main(["serve", str(workload_file(tmp_path)), "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
