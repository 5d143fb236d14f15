"""`steptrace run` of a P/D deployment on the CPU: every instance an engine process, each
prefilled sequence's KV sent prefill process -> decode process over gloo. With greedy
sampling the tokens are one process's, token for token; the hand-offs and transfers are in
the requests table; a decode process killed mid-run fails the run, named."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.model_config import load_model_config
from harness.record.table_reader import read_requests
from tests.test_ranks import ROOT, SLICE, TRACE, one_process, ranks_run, tokens, workload

__all__ = ["one_process"]  # the reference run, a fixture of this module's too

pytestmark = [pytest.mark.slow, pytest.mark.core]


@pytest.mark.parametrize("pools", [
    # two decode processes, the router reading the free blocks each reports
    "prefill: {instances: 1}, decode: {instances: 2}, router: {decode: least_kv}",
    # two prefill processes sending to one decode instance of two DP ranks with EP over
    # them and two micro-batches, in lockstep while their sequences wait for their KV
    "prefill: {instances: 2}, decode: {instances: 1, devices: 2, micro_batches: 2}",
])
def test_a_pd_deployment_samples_the_tokens_one_process_does(tmp_path, one_process, pools):
    body, expected = one_process
    run_dir = ranks_run(tmp_path, body, f"{{{pools}}}")
    pd.testing.assert_frame_equal(tokens(run_dir), expected)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    roles = [r["role"] for r in manifest["ranks"]]
    assert roles[0] == "prefill" and roles[-1] == "decode"
    requests = read_requests(run_dir / "requests.parquet").set_index("request_id")
    assert (requests["status"] == "finished").all()
    moved = requests[requests["max_new_tokens"] > 1]
    model = load_model_config("tiny")
    layers = model.num_hidden_layers + model.num_nextn_predict_layers
    # the latent cache of every layer at each prompt position, at the forward's float64
    per_token = layers * (model.kv_lora_rank + model.qk_rope_head_dim) * 8
    np.testing.assert_array_equal(moved["kv_bytes"], moved["prompt_len"] * per_token)
    assert (moved["handoff_s"] <= moved["transfer_start_s"]).all()
    assert (moved["transfer_start_s"] <= moved["transfer_end_s"]).all()
    # the user sees the first token when the KV has reached the decode
    np.testing.assert_array_equal(moved["first_token_s"], moved["transfer_end_s"])
    steps = pd.read_parquet(run_dir / "steps.parquet")
    ran = set(zip(steps["role"], steps["instance"], steps["dp_rank"]))
    assert ran == {(r["role"], r["instance"], r["dp_rank"]) for r in manifest["ranks"]}


def test_a_prefill_rejection_and_a_one_token_request_move_no_kv(tmp_path):
    """The prefill's pool (16 blocks of 16) cannot hold request 1's prompt: rejected there,
    with its reason; request 2 wants one output token, the prefill's: nothing is sent."""
    df = pd.read_csv(TRACE).head(4)
    df["max_new_tokens"] = df["max_new_tokens"].clip(upper=8)
    df.loc[1, "prompt_len"], df.loc[2, "max_new_tokens"] = 300, 1
    trace = tmp_path / "trace.csv"
    df.to_csv(trace, index=False)
    body = SLICE.format(trace=trace)
    run_dir = ranks_run(tmp_path, body, "{prefill: {instances: 1, engine: {num_kv_blocks: 16}},"
                                        " decode: {instances: 1}}")
    requests = read_requests(run_dir / "requests.parquet").set_index("request_id")
    assert requests.loc[1, "status"] == "rejected"
    assert "needs 19 KV blocks for 300 tokens" in requests.loc[1, "reason"]
    assert requests.loc[2, "status"] == "finished" and requests.loc[2, "output_tokens"] == 1
    assert requests.loc[2, "kv_bytes"] == 0 and np.isnan(requests.loc[2, "transfer_end_s"])
    assert (requests.loc[[0, 3], "status"] == "finished").all()
    assert (requests.loc[[0, 3], "kv_bytes"] > 0).all()


LONG_PD = """trace: {generate: {requests: 8, rate: 100, prompt: {uniform: [4, 40]},
                  output: {fixed: 4000}}}
engine: {max_num_batched_tokens: 256, num_kv_blocks: 2200}
model: tiny
device: cpu
deployment: {prefill: {instances: 1}, decode: {instances: 1}}
telemetry: {enabled: false}
calibration_requests: 0
"""


def test_a_decode_process_killed_mid_run_fails_the_run_and_names_it(tmp_path):
    path = workload(tmp_path, "long", LONG_PD)
    run = subprocess.Popen([sys.executable, "-m", "harness.commands", "run", str(path)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        manifests = list((tmp_path / "results" / "long").glob("*/manifest.json"))
        if manifests and "ranks" in json.loads(manifests[0].read_text() or "{}"):
            break
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.2)
    pids = [r["pid"] for r in json.loads(manifests[0].read_text())["ranks"]]
    time.sleep(3)  # decoding
    os.kill(pids[1], signal.SIGKILL)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    assert "rank 1 of 2 failed: exited with code -9 (signal 9)" in err
    manifest = json.loads((manifests[0]).read_text())
    assert manifest["complete"] is False and "rank 1 of 2 failed" in manifest["error"]
    requests = read_requests(manifests[0].parent / "requests.parquet")
    assert len(requests) == 8  # every request has its row, written whole
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
