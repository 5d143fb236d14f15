"""A session trace's summary rows (docs/metrics.md, "Sessions"): defined over the requests
and sessions tables, declared in the catalogue, shown by `steptrace show` and led with by
`steptrace compare`; a request trace's run has none."""

import json

import numpy as np
import pandas as pd
import pytest

from harness.commands import main
from harness.record.session_summary import session_summary
from harness.schema import summary
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from tests.test_sessions_workload import workload

pytestmark = pytest.mark.core


def frame(rows):
    return {(m, s): v for m, s, v, _ in rows.itertuples(index=False)}


def test_the_rows_by_definition():
    # session 0: a root [0, 2], two overlapping sub-agents [3, 5] and [4, 6], then a turn
    # [7, 8] (makespan 8, in the engine 2 + 3 + 1 = 6); session 1: a root [1, 3], one turn
    # rejected as it came (no last token) (makespan 2, in the engine 2)
    requests = pd.DataFrame({
        "session_id": [0, 0, 0, 0, 1, 1],
        "arrival_s": [0.0, 3.0, 4.0, 7.0, 1.0, 4.0],
        "last_token_s": [2.0, 5.0, 6.0, 8.0, 3.0, np.nan],
        "prompt_len": [100, 150, 150, 200, 100, 140],
        "prefix_hit_tokens": [0, 96, 96, 144, 32, -1],
        "status": ["finished", "finished", "finished", "finished", "finished", "rejected"],
        "ttft_s": [0.5, 0.1, 0.2, 0.3, 0.4, np.nan]})
    sessions = pd.DataFrame({"session_id": [0, 1], "turns": [4, 2],
                             "makespan_s": [8.0, 2.0]})
    first = np.array([True, False, False, False, True, False])
    measured = np.array([True, True, True, False, True, True])  # turn 3 in warm-up
    rows = session_summary(requests, sessions, first, measured)
    assert summary.uncatalogued(zip(rows["metric"], rows["stat"], rows["unit"])) == []
    got = frame(rows)
    assert got["session_makespan", "p50"] == 5.0 and got["session_makespan", "max"] == 8.0
    assert got["session_turns", "mean"] == 3.0
    assert got["session_time", "engine_share"] == pytest.approx(8.0 / 10.0)
    assert got["session_time", "gap_share"] == pytest.approx(2.0 / 10.0)
    assert got["session_prefix_hit", "first_turns"] == pytest.approx(32 / 200)
    assert got["session_prefix_hit", "later_turns"] == pytest.approx(336 / 640)
    # completed and measured (the warm-up turn and the rejected one left out): hits 0.1, 0.2
    # and session 1's root's 0.4; the one miss, session 0's root's 0.5
    assert got["ttft_prefix_hit", "count"] == 3
    assert got["ttft_prefix_hit", "mean"] == pytest.approx(0.7 / 3)
    assert got["ttft_prefix_miss", "count"] == 1 and got["ttft_prefix_miss", "p50"] == 0.5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of one session workload."""
    out = []
    for name in ("a", "b"):
        (done,) = run_workload(load_workload(workload(tmp_path_factory.mktemp(name))))
        out.append(done.path)
    return out


def test_a_session_run_writes_its_rows_from_its_tables(runs):
    table = pd.read_parquet(runs[0] / "summary.parquet")
    assert summary.uncatalogued(zip(table["metric"], table["stat"], table["unit"])) == []
    got = frame(table[["metric", "stat", "value", "unit"]])
    sessions = pd.read_parquet(runs[0] / "sessions.parquet")
    requests = pd.read_parquet(runs[0] / "requests.parquet")
    assert got["session_makespan", "p50"] == pytest.approx(sessions["makespan_s"].median())
    assert got["session_turns", "count"] == len(sessions)
    assert got["session_turns", "mean"] == pytest.approx(sessions["turns"].mean())
    assert 0 < got["session_time", "engine_share"] < 1
    assert got["session_time", "engine_share"] + got["session_time", "gap_share"] == \
        pytest.approx(1.0)
    assert got["session_prefix_hit", "later_turns"] > got["session_prefix_hit", "first_turns"]
    assert got["ttft_prefix_hit", "count"] + got["ttft_prefix_miss", "count"] == \
        got["ttft", "count"] == len(requests)


def test_show_and_compare_lead_with_the_session_rows(runs, capsys):
    capsys.readouterr()
    assert main(["show", str(runs[0])]) == 0
    shown = capsys.readouterr().out
    for metric, stat in (("session_makespan", "p99"), ("session_time", "engine_share"),
                         ("session_prefix_hit", "later_turns"), ("ttft_prefix_miss", "p50")):
        assert metric in shown and stat in shown
    assert main(["compare", str(runs[0]), "--", str(runs[1]), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"session_makespan.p50", "session_time.engine_share",
            "session_prefix_hit.later_turns"} <= set(result["headline"])
    says = {m["metric"]: m["says"] for m in result["metrics"]}
    for metric in ("session_makespan.p99", "session_turns.mean", "session_time.gap_share",
                   "session_prefix_hit.first_turns", "ttft_prefix_hit.p50"):
        assert says[metric] == "equal (deterministic: modeled runs)", metric


def test_a_request_trace_run_has_no_session_rows(tmp_path):
    from tests.helpers import MODELED

    path = tmp_path / "w.yaml"
    path.write_text(MODELED + f"output: {tmp_path / 'r'}\n")
    (done,) = run_workload(load_workload(path))
    table = pd.read_parquet(done.path / "summary.parquet")
    assert not table["metric"].str.startswith(("session_", "ttft_prefix_")).any()


def test_engine_time_is_the_union_of_each_sessions_turns():
    """Against the definition, one session at a time: its turns in arrival order merged
    into spans, their lengths added in order (equal to the last bit); a turn without a
    last token adds nothing, a session with none has 0."""
    from harness.record.session_summary import engine_time

    def union(a, b):
        total, spans = 0.0, sorted(zip(a, b), key=lambda span: span[0])
        lo, hi = spans[0]
        for x, y in spans[1:]:
            if x > hi:
                total += hi - lo
                lo, hi = x, y
            else:
                hi = max(hi, y)
        return total + hi - lo

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        sid = rng.integers(0, int(rng.integers(1, 6)), n) * 3
        start = np.round(rng.random(n) * 10, int(rng.integers(0, 3)))
        end = start + np.round(rng.random(n) * 3, int(rng.integers(0, 3)))
        end[rng.random(n) < 0.2] = np.nan
        got = engine_time(sid, start, end)
        assert got.index.tolist() == sorted(set(sid.tolist()))
        for s, value in got.items():
            ended = (sid == s) & ~np.isnan(end)
            assert value == (union(start[ended], end[ended]) if ended.any() else 0.0)
