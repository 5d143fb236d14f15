"""`steptrace run` over engine processes, one per device (gloo on the CPU): the same tokens
as one process (2 ranks, DP alone and with EP; 4 ranks with EP over 4), a rank killed
mid-run, a collective that never completes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.record.table_reader import read_requests
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload

pytestmark = [pytest.mark.slow, pytest.mark.core]

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "workloads" / "traces" / "synthetic_small.csv"
SLICE = """trace: {{file: {trace}, time_scale: 0.05}}
engine: {{max_num_batched_tokens: 512, num_kv_blocks: 256, max_num_seqs: 4, num_mtp: 1}}
model: tiny
device: cpu
sampling: greedy
tokens: true
telemetry: {{enabled: false}}
calibration_requests: 0
"""


def sliced(tmp_path):
    """The bundled trace's first 6 rows, their outputs cut to 8 tokens (the tiny model on
    a loaded host)."""
    df = pd.read_csv(TRACE).head(6)
    df["max_new_tokens"] = df["max_new_tokens"].clip(upper=8)
    path = tmp_path / "slice.csv"
    df.to_csv(path, index=False)
    return SLICE.format(trace=path)


def workload(tmp_path, name, body):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\noutput: {tmp_path / 'results'}\n{body}")
    return path


TOKENS = ["request_id", "position", "token_id"]


def tokens(run_dir):
    return pd.read_parquet(run_dir / "tokens.parquet")[TOKENS]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The slice's workload and the tokens one process samples for it: the reference every
    rank count below is held to."""
    tmp_path = tmp_path_factory.mktemp("one")
    body = sliced(tmp_path)
    (run,) = run_workload(load_workload(workload(tmp_path, "one", body)))
    one = run.path
    expected = tokens(one)
    assert len(expected) > 0
    return body, expected


def ranks_run(tmp_path, body, deployment):
    """The slice run over rank processes, to completion: its folder."""
    (run,) = run_workload(load_workload(workload(
    tmp_path, "ranks", body + f"deployment: {deployment}\n")))
    run_dir = run.path
    assert json.loads((run_dir / "manifest.json").read_text())["complete"] is True
    return run_dir


@pytest.mark.parametrize("deployment", [
    "{devices: 2, moe: {ep: 1}}",  # DP alone: every expert on every rank
    "{devices: 2, micro_batches: 2}",  # EP2 (the default ep), two micro-batches
])
def test_two_ranks_sample_the_tokens_one_process_does(tmp_path, one_process, deployment):
    body, expected = one_process
    two = ranks_run(tmp_path, body, deployment)
    pd.testing.assert_frame_equal(tokens(two), expected)
    steps = pd.read_parquet(two / "steps.parquet")
    assert sorted(steps["dp_rank"].unique()) == [0, 1]
    per_rank = steps.groupby("dp_rank")["step"].apply(list)
    assert per_rank[0] == per_rank[1]  # one row per step and rank: the ranks in lockstep
    requests = read_requests(two / "requests.parquet")
    assert (requests["dp_rank"] == requests["request_id"] % 2).all()  # round robin
    # measured around the real calls, on each rank; the all-to-alls with EP alone
    parts = steps.groupby("dp_rank")[["attention_s", "experts_s", "dispatch_s", "combine_s"]]
    assert (parts.sum()[["attention_s", "experts_s"]] > 0).all().all()
    ep = "micro" in deployment
    assert ((parts.sum()[["dispatch_s", "combine_s"]] > 0) == ep).all().all()


def test_four_ranks_with_ep_over_four_sample_the_tokens_one_process_does(tmp_path,
                                                                        one_process):
    """EP4: each rank holds 2 of the tiny model's 8 experts; its tokens go to the other
    three ranks and back in every MoE layer."""
    body, expected = one_process
    four = ranks_run(tmp_path, body, "{devices: 4, moe: {ep: 4}}")
    pd.testing.assert_frame_equal(tokens(four), expected)
    steps = pd.read_parquet(four / "steps.parquet")
    per_rank = steps.groupby("dp_rank")["step"].apply(list)
    assert list(per_rank.index) == [0, 1, 2, 3]
    assert all(steps_of == per_rank[0] for steps_of in per_rank)  # in lockstep
    requests = read_requests(four / "requests.parquet")
    assert (requests["dp_rank"] == requests["request_id"] % 4).all()  # round robin
    exchanged = steps.groupby("dp_rank")[["dispatch_s", "combine_s"]].sum()
    assert (exchanged > 0).all().all()  # every rank exchanged its tokens


# minutes of decoding on any host: a rank is stopped while it runs
LONG = """trace: {generate: {requests: 8, rate: 100, prompt: {uniform: [4, 40]},
                  output: {fixed: 4000}}}
engine: {max_num_batched_tokens: 256, num_kv_blocks: 2200}
model: tiny
device: cpu
deployment: {devices: 2, moe: {ep: 1}}
telemetry: {enabled: false}
calibration_requests: 0
"""


def start_run(tmp_path, extra=""):
    """`steptrace run` of a long run over 2 ranks, as a user starts it; its rank
    processes' ids once the manifest names them."""
    path = workload(tmp_path, "long", LONG + extra)
    run = subprocess.Popen([sys.executable, "-m", "harness.commands", "run", str(path)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        manifests = list((tmp_path / "results" / "long").glob("*/manifest.json"))
        if manifests and "ranks" in json.loads(manifests[0].read_text() or "{}"):
            pids = {r["rank"]: r["pid"] for r in json.loads(manifests[0].read_text())["ranks"]}
            time.sleep(3)  # some steps in
            return run, manifests[0].parent, pids
        assert run.poll() is None, run.communicate()
        time.sleep(0.2)
    run.kill()
    raise AssertionError("the ranks did not start")


def failed_run(run, run_dir):
    _, err = run.communicate(timeout=120)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run.returncode == 1, err
    assert manifest["complete"] is False and manifest["interrupted"] is False
    steps = pd.read_parquet(run_dir / "steps.parquet")  # what ran, readable
    return err, manifest, steps


def test_a_rank_killed_mid_run_fails_the_run_and_names_it(tmp_path):
    run, run_dir, pids = start_run(tmp_path)
    os.kill(pids[1], signal.SIGKILL)
    err, manifest, steps = failed_run(run, run_dir)
    assert "rank 1 of 2 failed: exited with code -9 (signal 9)" in err
    assert "rank 1 of 2 failed" in manifest["error"]
    assert len(steps) > 0 and set(steps["dp_rank"]) <= {0, 1}
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids.values())  # the others stopped


def test_a_collective_that_never_completes_is_found_by_the_timeout(tmp_path):
    run, run_dir, pids = start_run(tmp_path, "collective_timeout_s: 3\n")
    os.kill(pids[1], signal.SIGSTOP)  # rank 1 never joins the next vote
    try:
        err, manifest, steps = failed_run(run, run_dir)
    finally:
        if Path(f"/proc/{pids[1]}").exists():
            os.kill(pids[1], signal.SIGKILL)
    assert "rank 0 of 2 failed: CollectiveError: rank 0: the DP vote's all_reduce" in err
    assert "still running, not reporting: rank 1" in err
    assert "the DP vote's all_reduce" in manifest["error"]
    assert len(steps) > 0


def test_the_ranks_end_when_the_harness_is_killed_outright(tmp_path):
    run, _, pids = start_run(tmp_path)
    run.kill()
    run.communicate()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in pids.values()):
        assert time.monotonic() < deadline, "a rank outlived the harness"
        time.sleep(0.1)
