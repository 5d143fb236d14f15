"""load.mode (docs/workloads.md, "load"): the trace's arrivals, a closed loop of N requests
in flight, or every request at once."""

import json

import pandas as pd
import pytest

from harness.commands import main
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from tests.helpers import MODELED

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

TRACE = "trace:\n  generate: {requests: 30, rate: 1000, prompt: {uniform: [100, 2000]}, " \
        "output: {uniform: [10, 120]}}\n"


def run(tmp_path, load: str) -> pd.DataFrame:
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\n{TRACE}{MODELED.split(chr(10), 2)[2]}"
                    f"load: {load}\n")
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    return pd.read_parquet(run_dir / "requests.parquet").sort_values("arrival_s")


def in_flight(requests: pd.DataFrame) -> int:
    """The most requests between arrival and their last token at once."""
    events = sorted([(t, 1) for t in requests["arrival_s"]]
                    + [(t, -1) for t in requests["last_token_s"]])
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def test_a_closed_loop_keeps_its_window_in_flight_and_counts_from_release(tmp_path):
    requests = run(tmp_path, "{mode: concurrency, concurrency: 4}")
    assert (requests["status"] == "finished").all() and in_flight(requests) == 4
    first = requests.iloc[:4]
    assert (first["arrival_s"] == 0).all()
    # each later request is released when an earlier one leaves, and enqueued then
    left = set(requests["last_token_s"])
    assert all(t in left for t in requests["arrival_s"].iloc[4:])
    assert (requests["enqueue_s"] == requests["arrival_s"]).all()
    assert (requests["ttft_s"] == requests["first_token_s"] - requests["arrival_s"]).all()


def test_offline_sends_every_request_at_once(tmp_path):
    requests = run(tmp_path, "{mode: offline}")
    assert (requests["arrival_s"] == 0).all() and (requests["status"] == "finished").all()


@pytest.mark.slow
def test_a_closed_loop_on_the_real_clock_ends(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\ntrace:\n  generate: {{requests: 8, rate: 1000, "
                    "prompt: {fixed: 16}, output: {fixed: 4}}\nmodel: tiny\ndevice: cpu\n"
                    "calibration_requests: 0\ntelemetry: {enabled: false}\n"
                    "load: {mode: concurrency, concurrency: 2}\n")
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert (requests["status"] == "finished").all() and in_flight(requests) == 2


@pytest.mark.parametrize("load, words", [
    ("{mode: concurrency}", "load.concurrency: load.mode: concurrency needs the requests in "
                            "flight: expected an integer >= 1"),
    ("{concurrency: 4}", "load.concurrency: only load.mode: concurrency takes it, and "
                         "load.mode is trace"),
    ("{mode: closed}", "load.mode: expected one of trace, concurrency, offline"),
    ("{mode: concurrency, concurrency: 2}\nclock: real\nfrontend: {mode: thread}",
     "frontend.mode: a frontend thread enqueues at the trace's arrival times"),
])
def test_a_load_that_cannot_run_is_refused_by_key(tmp_path, capsys, load, words):
    path = tmp_path / "w.yaml"
    path.write_text(f"{TRACE}model: tiny\ndevice: cpu\nload: {load}\n")
    assert main(["validate", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert words in err and json.loads(out)["exit_code"] == 2


def test_capacity_refuses_an_offline_load(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(f"{TRACE}{MODELED.split(chr(10), 2)[2]}slo: {{ttft: 1}}\n"
                    "load: {mode: offline}\n")
    assert main(["capacity", str(path)]) == 2
    assert "load.mode: capacity searches the arrival rate of an open loop, and load.mode " \
           "offline has no rate: expected trace" in capsys.readouterr().err
