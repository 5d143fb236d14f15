"""The trace-event export: valid Chrome/Perfetto JSON (ph X and C, ts and dur in µs), one
track per DP rank, spans in step order on each track, every part inside its step, and the
counter tracks, each with an event where its value changes."""

import json

import pytest

from harness.commands import main
from tests.helpers import modeled_runs

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

COUNTERS = {"batch tokens", "running", "waiting", "free KV blocks"}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    (run,) = modeled_runs(root, "deployment.attention.dp=2", "deployment.attention.tp=4")
    assert main(["report", str(run), "-o", str(root / "r"), "--trace-events"]) == 0
    (path,) = (root / "r" / "trace-events").iterdir()
    return run, json.loads(path.read_text())


def test_events_follow_the_trace_event_format(trace):
    _, doc = trace
    events = doc["traceEvents"]
    assert {e["ph"] for e in events} == {"M", "X", "C"}
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0 and isinstance(e["tid"], int)
        if e["ph"] == "C":
            assert e["ts"] >= 0 and set(e["args"]) == {e["name"]}
            assert isinstance(e["args"][e["name"]], int)


def test_one_track_per_dp_rank_in_step_order_with_parts_inside_steps(trace):
    import pandas as pd

    run, doc = trace
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {0: "DP rank 0", 1: "DP rank 1"}
    steps = pd.read_parquet(run / "steps.parquet", columns=["step", "dp_rank"])
    for pid in names:
        spans = [e for e in events if e["ph"] == "X" and e["pid"] == pid]
        steps_here = [e for e in spans if e["name"].endswith(" step")]
        assert [e["args"]["step"] for e in steps_here] == \
            sorted(steps.loc[steps.dp_rank == pid, "step"])
        ts = [e["ts"] for e in spans]
        assert ts == sorted(ts)  # per-track monotonic
        parent = None
        for e in spans:
            if e["name"].endswith(" step"):
                parent = e
                continue
            assert e["name"] in ("schedule", "forward", "postprocess")
            assert parent["ts"] <= e["ts"] and \
                e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 1e-6
        counters = [e for e in events if e["ph"] == "C" and e["pid"] == pid]
        assert {e["name"] for e in counters} == COUNTERS
        for name in COUNTERS:  # one event where the value changes, starting at the first step
            mine = [e for e in counters if e["name"] == name]
            values = [e["args"][name] for e in mine]
            assert mine[0]["ts"] == steps_here[0]["ts"]
            assert all(a != b for a, b in zip(values, values[1:]))


def test_a_step_whose_time_is_past_a_double_is_left_out_and_the_json_stays_json(trace,
                                                                                 tmp_path):
    """A steps table holding 1e308 s: in µs that is inf, which JSON cannot hold, so the
    step's spans and counters are left out; every other step is written, strictly JSON."""
    import shutil
    import warnings

    import numpy as np
    import pandas as pd

    run = shutil.copytree(trace[0], tmp_path / "run")
    steps = pd.read_parquet(run / "steps.parquet")
    steps.loc[steps.step == 1, ["t_start_s", "t_end_s"]] = 1e308
    steps.to_parquet(run / "steps.parquet")
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise"):
        warnings.simplefilter("error")
        assert main(["report", str(run), "-o", str(tmp_path / "r"), "--trace-events"]) == 0
    (path,) = (tmp_path / "r" / "trace-events").iterdir()
    doc = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c))
    written = sorted({e["args"]["step"] for e in doc["traceEvents"]
                      if e["ph"] == "X" and "step" in e.get("args", {})})
    assert written == sorted(set(steps.step) - {1})
