"""steptrace run end to end: tables, clocks, interruption, the real Azure trace."""

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.commands import main
from harness.record.table_reader import read_requests
from harness.replay import driver as replay_module
from harness.run.calibration import VIRTUAL_CLOCK, planned
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from tests.helpers import MODELED
from tests.test_frontend import CLOCK_SKEW_S

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

REPO = Path(__file__).resolve().parents[1]
AZURE = REPO / "workloads" / "traces" / "AzureLLMInferenceTrace_code.csv"
MEASURED = ["sched_cpp_ns", "sched_call_ns", "step_ns", "sample_ns", "postprocess_ns", "flush_ns",
            "run_id"]


def workload(tmp_path, body, **extra):
    text = f"output: {tmp_path / 'results'}\n{body}" + "".join(f"{k}: {v}\n" for k, v in extra.items())
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return load_workload(path)


GENERATED = """trace:
  generate: {requests: 24, rate: 200, prompt: {uniform: [4, 40]}, output: {uniform: [1, 8]}}
engine: {max_num_batched_tokens: 256, num_kv_blocks: 256}
model: tiny
"""


def read(run_dir, name):
    """A table; the requests table (rows written as requests leave) in request_id order."""
    if name == "requests":
        return read_requests(run_dir / "requests.parquet")
    return pd.read_parquet(run_dir / f"{name}.parquet")


def test_real_clock_run_writes_every_table(tmp_path):
    (run,) = run_workload(workload(tmp_path, GENERATED, device="cpu", warmup_steps=2))
    run_dir = run.path
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] and manifest["trace_rows"] == 24
    requests, steps, batches, summary = (read(run_dir, n) for n in
                                         ("requests", "steps", "batches", "summary"))
    assert len(requests) == 24 and (requests["status"] == "finished").all()
    assert (requests["output_tokens"] == requests["max_new_tokens"]).all()
    assert (requests["ttft_s"] > 0).all() and (requests["e2e_s"] >= requests["ttft_s"]).all()
    # fidelity: never early (but for the host's clock under load: tests/test_frontend.py)
    assert (requests["enqueue_s"] >= requests["arrival_s"] - CLOCK_SKEW_S).all()
    assert steps["warmup"].sum() == 2 and set(steps["phase"]) == {"prompt", "decode"}
    per_step = batches.groupby("step")["seqlen_q"].sum()
    assert (steps.set_index("step")["tokens_q"].reindex(per_step.index) == per_step).all()
    stats = summary.set_index(["metric", "stat"])["value"]
    assert stats[("requests", "finished")] + stats[("requests", "warmup")] == 24
    tables = (requests, steps, batches, summary, read(run_dir, "device"))
    assert {str(t["run_id"].dtype) for t in tables} == {"category"}  # one dtype everywhere
    assert {str(t["overlap"].dtype) for t in tables} == {"bool"}


def test_the_manifest_names_the_checkouts_commit_and_its_date(tmp_path):
    (run,) = run_workload(workload(tmp_path, GENERATED, device="modeled:B200",
                                   calibration_requests=0))
    run_dir = run.path
    manifest = json.loads((run_dir / "manifest.json").read_text())
    head = subprocess.run(["git", "log", "-1", "--format=%H %cI"], capture_output=True,
                          text=True, cwd=REPO).stdout.split()
    assert [manifest["git_sha"], manifest["git_date"]] == (head or [None, None])


@pytest.mark.slow
def test_virtual_clock_modeled_runs_are_identical(tmp_path):
    body = GENERATED.replace("model: tiny", "model: deepseek-v3\ndeployment: {devices: 8}")
    runs = [run_workload(workload(tmp_path, body, device="modeled:B200", precision="fp8"))[0].path
            for _ in range(2)]
    assert runs[0] != runs[1]  # a run never overwrites another
    for name in ("steps", "requests", "batches"):
        a, b = (read(r, name).drop(columns=MEASURED, errors="ignore") for r in runs)
        pd.testing.assert_frame_equal(a, b)
    steps = read(runs[0], "steps")
    assert np.allclose(steps["t_end_s"] - steps["t_start_s"], steps["forward_ns"] / 1e9)


@pytest.mark.slow
def test_interrupted_run_leaves_readable_incomplete_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(replay_module, "PROGRESS_EVERY", 1)

    def ctrl_c_after_five(done, total):
        if done >= 5:
            raise KeyboardInterrupt
    (run,) = run_workload(workload(tmp_path, GENERATED, device="cpu"), ctrl_c_after_five)
    run_dir = run.path
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["interrupted"]
    requests = read(run_dir, "requests")
    assert len(requests) == 24 and (requests["status"] == "unfinished").any()
    steps, batches = read(run_dir, "steps"), read(run_dir, "batches")
    assert len(steps) > 0 and set(batches["step"]) <= set(steps["step"])
    assert not list(run_dir.glob(".*tmp"))  # no half-written file


@pytest.mark.slow
def test_azure_trace_replay_keeps_every_request(tmp_path):
    w = workload(tmp_path, f"trace: {{file: {AZURE}}}\nmodel: deepseek-v3\n"
                           "engine: {max_num_batched_tokens: 16384, max_num_seqs: 256, "
                           "block_size: 64}\ndeployment: {devices: 8}\n",
                 device="modeled:H200", precision="fp8")
    (run,) = run_workload(w)
    run_dir = run.path
    requests = read(run_dir, "requests")
    trace = pd.read_csv(AZURE)
    assert len(requests) == len(trace) == 8819
    assert (requests["prompt_len"].to_numpy() == trace["ContextTokens"].to_numpy()).all()
    assert (requests["max_new_tokens"].to_numpy() == trace["GeneratedTokens"].to_numpy()).all()
    assert (requests["status"] == "finished").all()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["trace_sha256"] == \
        "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"  # the trace's README


def test_show_prints_a_summary(tmp_path, capsys):
    (run,) = run_workload(workload(tmp_path, GENERATED, device="cpu"))
    run_dir = run.path
    assert main(["show", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "[complete]" in out and "ttft p50" in out
    assert main(["show", str(tmp_path)]) == 2


@pytest.mark.slow
def test_runs_calibrate_the_harness_and_sample_the_host(tmp_path):
    (run,) = run_workload(workload(tmp_path, GENERATED, device="cpu",
                                   calibration_requests=10))
    run_dir = run.path
    manifest = json.loads((run_dir / "manifest.json").read_text())
    calibration = manifest["calibration"]
    longest = read(run_dir, "requests")["max_new_tokens"].iloc[:10].max()
    assert calibration["requests"] == 10 and calibration["steps"] >= longest  # a decode each
    assert calibration["per_step_us"] > 0 and calibration["per_request_us"] > 0
    stats = read(run_dir, "summary").set_index(["metric", "stat"])["value"]
    assert stats[("harness", "per_step")] == pytest.approx(calibration["per_step_us"])
    assert manifest["telemetry"]["cpu"].startswith("psutil")
    device = read(run_dir, "device")
    assert len(device) and set(device["source"]) == {"cpu"} and (device["device"] == -1).all()
    assert device["process_rss_bytes"].gt(0).all() and device["util_pct"].isna().all()
    assert ("process_cpu", "mean") in stats.index


def test_calibration_and_telemetry_can_be_switched_off(tmp_path):
    (run,) = run_workload(workload(tmp_path, GENERATED, device="cpu", calibration_requests=0,
                                   telemetry="{enabled: false}"))
    run_dir = run.path
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["calibration"] == {"off": "off: calibration_requests: 0"}
    assert manifest["telemetry"] == {"sampler": "telemetry.enabled: false"}
    assert read(run_dir, "device").empty
    assert "harness" not in set(read(run_dir, "summary")["metric"])


def test_a_virtual_clock_run_is_not_calibrated_by_default_and_says_why(tmp_path, capsys):
    body = MODELED.replace("calibration_requests: 0\n", "")
    (run,) = run_workload(workload(tmp_path, body))
    run_dir = run.path
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["values"]["calibration_requests"] is None
    assert manifest["calibration"] == {"off": VIRTUAL_CLOCK}
    assert "harness" not in set(read(run_dir, "summary")["metric"])
    assert main(["show", str(run_dir)]) == 0
    assert f"  note: harness calibration {VIRTUAL_CLOCK}\n" in capsys.readouterr().out
    assert main(["show", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"] == {"off": VIRTUAL_CLOCK}


def test_a_number_calibrates_on_the_virtual_clock_too(tmp_path):
    body = MODELED.replace("calibration_requests: 0", "calibration_requests: 50")
    (run,) = run_workload(workload(tmp_path, body))
    run_dir = run.path
    calibration = json.loads((run_dir / "manifest.json").read_text())["calibration"]
    assert calibration["requests"] == 12 and "off" not in calibration  # the trace's 12
    assert "harness" in set(read(run_dir, "summary")["metric"])


def test_the_default_calibration_is_500_requests_on_the_real_clock_none_on_the_virtual():
    def workload(calibration_requests=None, clock="real"):
        return SimpleNamespace(calibration_requests=calibration_requests, clock=clock)
    assert planned(workload(), 10_000) == (500, None)
    assert planned(workload(), 20) == (20, None)  # the trace's rows at most
    assert planned(workload(clock="virtual"), 10_000) == (0, VIRTUAL_CLOCK)
    assert planned(workload(50, clock="virtual"), 10_000) == (50, None)
    assert planned(workload(0), 10_000) == (0, "off: calibration_requests: 0")


@pytest.mark.slow
def test_sigterm_mid_run_leaves_readable_incomplete_tables(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    body = GENERATED.replace("requests: 24, rate: 200", "requests: 400, rate: 20")
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{body}device: cpu\n")
    proc = subprocess.Popen([sys.executable, "-m", "harness.commands", "run", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not list((tmp_path / "results").glob("w/*/manifest.json")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    time.sleep(2.0)  # well into the 20 s replay
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    (run_dir,) = (tmp_path / "results" / "w").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["interrupted"], output
    requests, steps = read(run_dir, "requests"), read(run_dir, "steps")
    assert len(requests) == 400 and (requests["status"] == "unfinished").any() and len(steps)
    assert not list(run_dir.glob(".*tmp"))


def test_an_slo_adds_goodput_counted_from_the_requests_table(tmp_path):
    from tests.helpers import modeled_runs

    (run,) = modeled_runs(tmp_path, "slo.ttft=0.05", "slo.tpot=0.02")
    req = read_requests(run / "requests.parquet")
    summary = pd.read_parquet(run / "summary.parquet").set_index(["metric", "stat"])["value"]
    good = (req["status"] == "finished") & (req["ttft_s"] <= 0.05) \
        & ~(req["tpot_s"] > 0.02)  # a one-token request has no TPOT: it meets the limit
    assert 0 < good.sum() < len(req)  # the limits split the requests
    window = summary[("window", "duration")]
    assert summary[("goodput", "requests")] == pytest.approx(good.sum() / window)
    assert summary[("goodput", "attainment")] == pytest.approx(good.sum() / len(req))  # no warm-up
    assert (summary[("slo", "ttft")], summary[("slo", "tpot")]) == (0.05, 0.02)
