"""steptrace serve's protocol over HTTP, against a server of a small modeled engine in
this process: completions and chat, streamed and whole, usage, token-id prompts, the
models, health and metrics endpoints, and the requests it refuses (docs/serving.md)."""

import json
import math
import re
import socket
import urllib.request

import pytest

pytest.importorskip("aiohttp")

from tests.serving import error_of, events, get, post, served, words  # noqa: E402

MODEL = "tiny"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with served(tmp_path_factory.mktemp("serve")) as (url, _):
        yield url


def test_a_completion_counts_its_prompt_by_words_and_returns_max_tokens_tokens(server):
    status, body = post(server, "/v1/completions",
                        dict(model=MODEL, prompt="one two  three\nfour", max_tokens=7))
    assert status == 200
    reply = json.loads(body)
    assert reply["object"] == "text_completion" and reply["model"] == MODEL
    assert reply["usage"] == dict(prompt_tokens=4, completion_tokens=7, total_tokens=11)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "length" and words(choice["text"]) == 7


def test_a_lone_surrogate_in_text_is_a_word_as_any_other(server):
    # JSON allows "\ud800"; it is counted and hashed as it came, not a 500
    for path, body in (("/v1/completions", b'{"prompt": "hi \\ud800 there", "max_tokens": 2}'),
                       ("/v1/chat/completions", b'{"messages": [{"role": "user", '
                                                b'"content": "\\ud800"}], "max_tokens": 2}')):
        status, reply = post(server, path, body, raw=True)
        assert status == 200, reply
    assert json.loads(reply)["usage"]["prompt_tokens"] == 2  # "user:" and the surrogate


def test_a_token_id_prompt_is_taken_as_its_ids(server):
    for prompt in ([5, 6, 7, 8, 9], [[5, 6, 7, 8, 9]]):
        status, body = post(server, "/v1/completions",
                            dict(prompt=prompt, max_tokens=3, ignore_eos=True))
        assert status == 200
        assert json.loads(body)["usage"]["prompt_tokens"] == 5


@pytest.mark.parametrize("usage", [True, False])
def test_a_stream_sends_chunks_then_done_and_usage_when_asked(server, usage):
    status, body = post(server, "/v1/completions",
                        dict(prompt="a b c", max_tokens=9, stream=True,
                             stream_options=dict(include_usage=usage)))
    assert status == 200
    data = events(body)
    assert data[-1] == "[DONE]"
    chunks = data[:-2] if usage else data[:-1]
    assert all(c["object"] == "text_completion" and len(c["choices"]) == 1 for c in chunks)
    assert sum(words(c["choices"][0]["text"]) for c in chunks) == 9
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    if usage:
        assert data[-2]["choices"] == []
        assert data[-2]["usage"] == dict(prompt_tokens=3, completion_tokens=9,
                                         total_tokens=12)
    else:
        assert all("usage" not in c for c in chunks)


def test_chat_turns_messages_into_a_prompt_and_answers_as_the_assistant(server):
    messages = [dict(role="system", content="be brief"),
                dict(role="user", content=[dict(type="text", text="hello there")])]
    status, body = post(server, "/v1/chat/completions", dict(messages=messages, max_tokens=4))
    assert status == 200
    reply = json.loads(body)
    assert reply["object"] == "chat.completion"
    # "system: be brief\nuser: hello there"
    assert reply["usage"] == dict(prompt_tokens=6, completion_tokens=4, total_tokens=10)
    message = reply["choices"][0]["message"]
    assert message["role"] == "assistant" and words(message["content"]) == 4
    status, body = post(server, "/v1/chat/completions",
                        dict(messages=messages, max_completion_tokens=5, stream=True,
                             stream_options=dict(include_usage=True)))
    data = events(body)
    chunks = data[:-2]
    assert data[-1] == "[DONE]" and data[-2]["usage"]["completion_tokens"] == 5
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert sum(words(c["choices"][0]["delta"]["content"]) for c in chunks) == 5


def test_models_and_health(server):
    status, body = get(server, "/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == [MODEL]
    assert get(server, "/health")[0] == 200


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*)\} '
                    r'(\S+)$')


def test_metrics_are_prometheus_text_under_vllm_names(server):
    post(server, "/v1/completions", dict(prompt="x y", max_tokens=2))
    status, body = get(server, "/metrics")
    assert status == 200
    types, samples = {}, {}
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        elif line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, line
            name, labels, value = match.groups()
            samples.setdefault(name, []).append((labels, float(value)))
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc"):
        assert types[name] == "gauge" and len(samples[name]) == 1
    assert 0 <= samples["vllm:kv_cache_usage_perc"][0][1] <= 1
    assert samples["vllm:generation_tokens_total"][0][1] >= 2
    for name in ("vllm:iteration_tokens_total", "steptrace:step_duration_seconds"):
        assert types[name] == "histogram"
        buckets = [v for _, v in samples[f"{name}_bucket"]]
        assert buckets == sorted(buckets) and 'le="+Inf"' in samples[f"{name}_bucket"][-1][0]
        assert buckets[-1] == samples[f"{name}_count"][0][1] > 0
        assert math.isfinite(samples[f"{name}_sum"][0][1])


@pytest.mark.parametrize("body, status, param", [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    (dict(prompt="a", max_tokens="5"), 400, "max_tokens"),
    (dict(prompt="a", max_tokens=0), 400, "max_tokens"),
    (dict(prompt="a", stream="yes"), 400, "stream"),
    (dict(prompt="a", stream_options=dict(include_usage=1)), 400,
     "stream_options.include_usage"),
    (dict(prompt="a", ignore_eos="true"), 400, "ignore_eos"),
    (dict(prompt="a", temperature="hot"), 400, "temperature"),
    (dict(prompt="   "), 400, "prompt"),
    (dict(prompt=[1, -2]), 400, "prompt"),
    (dict(prompt=["a", "b"]), 400, "prompt"),
    (dict(prompt=7), 400, "prompt"),
    (dict(prompt="a", n=2), 400, "n"),
    (dict(prompt="a", model="another"), 404, "model"),
])
def test_bad_requests_are_4xx_in_openais_error_shape(server, body, status, param):
    raw = isinstance(body, bytes)
    response = post(server, "/v1/completions", body, raw=raw)
    assert response[0] == status
    assert error_of(response)["param"] == param


def test_a_chat_without_messages_is_refused(server):
    response = post(server, "/v1/chat/completions", dict(messages=[]))
    assert response[0] == 400 and error_of(response)["param"] == "messages"


def test_a_prompt_the_engine_can_never_hold_is_refused_with_the_schedulers_reason(server):
    for stream in (False, True):
        response = post(server, "/v1/completions",
                        dict(prompt=[1] * 5000, max_tokens=4, stream=stream))
        assert response[0] == 400
        assert "KV blocks" in error_of(response)["message"]


def test_a_body_over_the_limit_is_413(server):
    from harness.serve.server import MAX_BODY_BYTES
    response = post(server, "/v1/completions", b" " * (MAX_BODY_BYTES + 1), raw=True)
    assert response[0] == 413 and error_of(response)["code"] == 413


def test_requests_beyond_the_concurrency_limit_are_429_and_the_port_is_freed(tmp_path):
    with served(tmp_path, max_concurrency=1) as (url, _):
        held = urllib.request.urlopen(urllib.request.Request(
            url + "/v1/completions", data=json.dumps(dict(
                prompt="a", max_tokens=4000, stream=True)).encode()), timeout=60)
        try:
            assert held.readline().startswith(b"data: ")  # in flight
            response = post(url, "/v1/completions", dict(prompt="b", max_tokens=1))
            assert response[0] == 429 and error_of(response)["type"] == "rate_limit_error"
        finally:
            held.close()
        port = int(url.rsplit(":", 1)[1])
    with socket.socket() as s:  # no listener left (a closed connection's TIME_WAIT may be)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_requests_beyond_the_runs_capacity_are_503(tmp_path):
    with served(tmp_path, max_requests=1) as (url, _):
        assert post(url, "/v1/completions", dict(prompt="a", max_tokens=1))[0] == 200
        response = post(url, "/v1/completions", dict(prompt="a", max_tokens=1))
        assert response[0] == 503 and "--max-requests" in error_of(response)["message"]


def test_a_stream_in_flight_when_the_server_stops_ends_with_an_error_and_is_recorded(
        tmp_path):
    import threading

    import pandas as pd
    rest = []
    with served(tmp_path) as (url, runs):
        held = urllib.request.urlopen(urllib.request.Request(
            url + "/v1/completions", data=json.dumps(dict(
                prompt="a", max_tokens=4000, stream=True)).encode()), timeout=60)
        assert held.readline().startswith(b"data: ")
        reader = threading.Thread(target=lambda: rest.append(held.read()))
        reader.start()
    reader.join(30)
    data = events(rest[0].lstrip(b"\n"))
    assert data[-1] == "[DONE]" and data[-2]["error"]["code"] == 503
    requests = pd.read_parquet(runs[0].path / "requests.parquet")
    assert requests["status"].tolist() == ["unfinished"]
    assert 0 < requests["output_tokens"][0] < 4000
