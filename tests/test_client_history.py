"""`steptrace history` of runs against an endpoint: the engine under test is the
endpoint's, so such a run records a commit only from $STEPTRACE_COMMIT (never steptrace's
own checkout), `history add` without one says so and writes nothing, and with one the runs
are a series that `history detect` reads as any other."""

from __future__ import annotations

import json

import pytest

from harness.commands import main
from harness.record.run import Run
from tests.serving import aiohttp_endpoint, endpoint_with_metrics

pytest.importorskip("aiohttp")

WORKLOAD = """trace:
  generate: {{requests: 3, rate: 50, output: {{fixed: 4}}}}
target: {{endpoint: "{url}", model: m}}
telemetry: {{enabled: false}}
calibration_requests: 0
output: {output}
name: client
"""


def client_runs(tmp_path, monkeypatch, commits):
    """A run against one endpoint per (commit, date); None: neither variable set."""
    with aiohttp_endpoint(endpoint_with_metrics(404, "")) as url:
        path = tmp_path / "client.yaml"
        path.write_text(WORKLOAD.format(url=url, output=tmp_path / "results"))
        for given in commits:
            monkeypatch.delenv("STEPTRACE_COMMIT", raising=False)
            monkeypatch.delenv("STEPTRACE_COMMIT_DATE", raising=False)
            if given is not None:
                monkeypatch.setenv("STEPTRACE_COMMIT", given[0])
                monkeypatch.setenv("STEPTRACE_COMMIT_DATE", given[1])
            assert main(["run", str(path)]) == 0
    return sorted((tmp_path / "results" / "client").iterdir())


def test_add_refuses_a_run_without_the_endpoints_commit_saying_why(tmp_path, monkeypatch,
                                                                  capsys):
    (run,) = client_runs(tmp_path, monkeypatch, [None])
    assert Run.read(run).manifest.git_sha is None  # steptrace's checkout is not the engine
    capsys.readouterr()
    store = tmp_path / "store"
    assert main(["history", "add", str(run), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "against an endpoint" in err and "STEPTRACE_COMMIT" in err and "--commit" in err
    assert not store.exists()
    assert main(["history", "add", str(run), "--store", str(store), "--commit", "v0.10.1",
                 "--date", "2026-11-30"]) == 0


def test_runs_at_the_endpoints_commits_are_one_series_detect_reads(tmp_path, monkeypatch,
                                                                   capsys):
    pytest.importorskip("otava")
    commits = [("aaa", "2026-12-01T00:00:00Z"), ("bbb", "2026-12-02T00:00:00Z")]
    runs = client_runs(tmp_path, monkeypatch, commits)
    store = str(tmp_path / "store")
    assert main(["history", "add", *map(str, runs), "--store", store]) == 0
    capsys.readouterr()
    assert main(["history", "show", "--store", store, "--metric", "ttft.p50", "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert [c["commit"] for c in series["commits"]] == ["aaa", "bbb"]
    assert series["device"].startswith("m at http://127.0.0.1:")
    assert main(["history", "detect", "--store", store, "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    # two commits: too short a series for a change point, said so, never an error
    assert said["regressions"] == 0 and said["change_points"] == [] and said["too_short"] > 0
