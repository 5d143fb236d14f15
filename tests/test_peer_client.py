"""`steptrace serve` driven by a peer's own client, GuideLLM (the `peers` extra), as a user
drives it: GuideLLM's per-request TTFT and ITL against the served run's requests table, and
its summary beside steptrace's own client's (a workload's `target`) against the same server.

Where each clock starts (docs/serving.md, "Checked against a peer"): the served run's TTFT
counts from when the engine's thread took the request and ends at the step that committed
the token; GuideLLM's from just before its HTTP request is sent to the chunk's arrival;
steptrace's client's from the request's intended arrival. So, per request, GuideLLM's TTFT
is the server's plus the network and two event loops, never less; an ITL (GuideLLM's
`inter_token_latency_ms`, the served run's TPOT: (last - first token) / (tokens - 1)) is the
same either way within the delivery jitter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("guidellm")

from tests.serving import (  # noqa: E402
    ONE_TOKEN_EVENTS,
    TPOT_SLACK_S,
    TTFT_SLACK_S,
    client_run,
    served,
)

pytestmark = pytest.mark.slow

REQUESTS, RATE, OUTPUT = 24, 8, 16  # one request at a time (125 ms apart), 16 tokens each
# The two clients' medians (TTFT, ITL, E2E) agree within this, either way: each is the
# server's plus a few milliseconds of client and network (2 to 6 ms measured here)
MEDIAN_SLACK_S = 0.02


def word_tokenizer(path: Path) -> Path:
    """A Hugging Face tokenizer saved at `path` that counts as `steptrace serve` counts (a
    token a word) and writes each token as `w`; GuideLLM draws its synthetic prompts with it,
    so no tokenizer comes from a hub."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({"w": 0}, unk_token="w"))
    words.normalizer = normalizers.Replace(Regex(r"\S+"), "w")
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words).save_pretrained(str(path))
    return path


def guidellm(url: str, tmp_path: Path) -> dict:
    """GuideLLM's benchmark of `url` at RATE req/s, prompts of 8 to 64 words: its report."""
    report = tmp_path / "guidellm.json"
    data = (f"kind=synthetic_text,prompt_tokens=32,prompt_tokens_stdev=16,"
            f"prompt_tokens_min=8,prompt_tokens_max=64,output_tokens={OUTPUT}")
    command = [sys.executable, "-m", "guidellm", "run",
               "--backend", f"kind=openai_http,target={url},request_format=/v1/completions,"
                            "model=tiny",
               "--profile", f"kind=constant,rate={RATE}",
               "--constraint", f"kind=max_requests,count={REQUESTS}",
               "--data", data,
               "--tokenizer", f"kind=huggingface_auto,model={word_tokenizer(tmp_path / 'tok')}",
               "--output", f"kind=json,path={report}", "--disable-console"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text())


def test_guidellm_sees_the_served_requests_and_steptraces_client_agrees(tmp_path):
    (tmp_path / "server").mkdir()
    with served(tmp_path / "server", text=ONE_TOKEN_EVENTS) as (url, runs):
        benchmark = guidellm(url, tmp_path)["benchmarks"][0]
        trace = (f"trace:\n  generate: {{requests: {REQUESTS}, rate: {RATE}, arrival: constant, "
                 f"prompt: {{uniform: [8, 64]}}, output: {{fixed: {OUTPUT}}}}}\n")
        ours = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny}}', trace)
    served_rows = runs[0].table("requests").sort_values("request_id")
    assert len(served_rows) == 2 * REQUESTS and (served_rows["status"] == "finished").all()
    # GuideLLM's requests came first, one at a time: the server took them in the order sent
    theirs = served_rows.iloc[:REQUESTS].reset_index(drop=True)
    peer = pd.DataFrame(benchmark["requests"]["successful"])
    assert len(peer) == REQUESTS and not benchmark["requests"]["errored"]
    peer = peer.sort_values("request_start_time").reset_index(drop=True)
    assert peer["prompt_tokens"].tolist() == theirs["prompt_len"].tolist()
    assert (peer["output_tokens"] == OUTPUT).all() and (theirs["output_tokens"] == OUTPUT).all()
    extra = peer["time_to_first_token_ms"] / 1e3 - theirs["ttft_s"]
    assert (extra > 0).all() and (extra < TTFT_SLACK_S).all(), extra.tolist()
    itl = peer["inter_token_latency_ms"] / 1e3 - theirs["tpot_s"]
    assert (itl.abs() < TPOT_SLACK_S).all(), itl.tolist()

    # the two clients' summaries side by side
    metrics = benchmark["metrics"]
    peer_median = {name: metrics[field]["successful"]["median"] / scale
                   for name, field, scale in (("ttft", "time_to_first_token_ms", 1e3),
                                              ("itl", "inter_token_latency_ms", 1e3),
                                              ("e2e", "request_latency", 1.0))}
    mine = ours.table("requests")
    assert ours.complete and (mine["status"] == "finished").all() and len(mine) == REQUESTS
    our_median = dict(ttft=mine["ttft_s"].median(), itl=mine["tpot_s"].median(),
                      e2e=mine["e2e_s"].median())
    for name, value in peer_median.items():
        assert abs(value - our_median[name]) < MEDIAN_SLACK_S, (name, peer_median, our_median)
