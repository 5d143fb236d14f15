"""The results history: its store (one Parquet file per run, written whole), its series,
and the change points Apache Otava finds in them (docs/comparing.md, "History and change
points")."""

import importlib.util
import json
import os
import sys
import threading

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness.analysis import change_points, history_bench, history_series, history_store
from harness.analysis.history_place import MARKER
from harness.commands import main
from harness.errors import BadInput
from harness.record.run import Run
from harness.schema.summary import BETTER, SUMMARY, better
from tests.helpers import synthetic_run

# CONTRIBUTING.md, "Set-up": installed without the dependencies it declares
needs_otava = pytest.mark.skipif(importlib.util.find_spec("otava") is None,
                                 reason="apache-otava not installed: pip install --no-deps "
                                        "apache-otava==0.8.0")
METRICS = {"ttft.p99": (0.5, "s"), "throughput.output_tokens": (1000.0, "tok/s")}


def commit(i):
    return f"{i:02d}" + "c" * 38


def date(i):
    return f"2026-11-{i + 1:02d}T12:00:00+00:00"


def add(store, *runs, at=0, **kwargs):
    return main(["history", "add", *map(str, runs), "--store", str(store), "--commit",
                 commit(at), "--date", date(at), *kwargs.get("extra", ())])


def history(tmp_path, values_by_commit):
    """A store of synthetic runs measured on a GPU (their clock's figures have the device's
    noise floor): the i-th list's figures ({"ttft.p99": 0.5}) at commit i, a run each."""
    store = tmp_path / "store"
    for i, runs in enumerate(values_by_commit):
        for j, figures in enumerate(runs):
            run = on_gpu(synthetic_run(tmp_path / f"c{i}" / f"c{i}-r{j}", {
                name: (value, METRICS[name][1]) for name, value in figures.items()}))
            assert add(store, run, at=i, extra=["--json"]) == 0
    return store


def on_gpu(run):
    """`run` (a synthetic run of the CPU device) as measured on a GPU."""
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["device"] = dict(manifest["device"], backend="cuda", name="NVIDIA H100 80GB HBM3")
    path.write_text(json.dumps(manifest))
    return run


def stepped(rng, n=12, at=6, step=0.10, noise=0.01):
    """ttft.p99 and throughput around 0.5 s and 1000 tok/s, noise as a fraction, both
    worse by `step` from commit `at` on."""
    out = []
    for i in range(n):
        worse = 1 + step if i >= at else 1.0
        out.append([{"ttft.p99": 0.5 * worse * (1 + noise * rng.standard_normal()),
                     "throughput.output_tokens":
                         1000 / worse * (1 + noise * rng.standard_normal())}])
    return out


def test_every_declared_direction_names_a_catalogue_metric_and_stat():
    catalogue = {m.name: m for m in SUMMARY}
    for name, declared in BETTER.items():
        assert name in catalogue
        if isinstance(declared, dict):
            assert set(declared) <= set(catalogue[name].units)
    assert better("ttft", "p99") == "lower" and better("decode_mfu", "model") == "higher"
    assert better("requests", "finished") is None and better("ttft", "count") is None


def test_a_run_is_stored_as_rows_with_its_labels_and_commit(tmp_path):
    store = history(tmp_path, [[{"ttft.p99": 0.5, "throughput.output_tokens": 900.0}]])
    (path,) = history_store.files(store)
    rows = history_store.read(store)
    assert sorted(rows["metric"] + "." + rows["stat"]) == ["throughput.output_tokens",
                                                            "ttft.p99"]
    row = rows.iloc[0]
    assert (row["workload"], row["gil_mode"], row["modeled"]) == ("synthetic", "released",
                                                                 False)
    assert row["commit"] == commit(0) and row["commit_date"] == date(0)
    assert len(row["workload_hash"]) == 16 and path.stem == row["run_key"]


def test_adding_a_run_twice_is_a_no_op(tmp_path, capsys):
    run = synthetic_run(tmp_path / "r0", {"ttft.p99": (0.5, "s")})
    store = tmp_path / "store"
    assert add(store, run) == 0
    before = [(p.name, p.stat().st_mtime_ns) for p in store.iterdir()]
    capsys.readouterr()
    assert add(store, run, at=3, extra=["--json"]) == 0  # another commit changes nothing
    out = json.loads(capsys.readouterr().out)
    assert out["added"] == [] and out["already_there"] == [str(run)]
    assert [(p.name, p.stat().st_mtime_ns) for p in store.iterdir()] == before
    assert len(history_store.read(store)) == 1


def test_two_runs_that_differ_only_by_their_settings_are_two_runs(tmp_path):
    """One process, one second, one folder name: a sweep's or a test's runs in a row."""
    one = Run.read(synthetic_run(tmp_path / "a" / "r0", {"ttft.p99": (0.5, "s")}))
    two = Run.read(synthetic_run(tmp_path / "b" / "r0", {"ttft.p99": (0.5, "s")},
                                 values={"engine": {"max_num_seqs": 4}}))
    assert history_store.run_key(one) != history_store.run_key(two)


def test_a_folder_of_runs_adds_each(tmp_path, capsys):
    for i in range(3):
        synthetic_run(tmp_path / "sweep" / f"r{i}", {"ttft.p99": (0.5 + i, "s")})
    assert add(tmp_path / "store", tmp_path / "sweep") == 0
    assert "added 3 run(s)" in capsys.readouterr().out
    assert len(history_store.files(tmp_path / "store")) == 3


def test_concurrent_adds_lose_and_tear_no_row(tmp_path):
    runs = [Run.read(synthetic_run(tmp_path / f"r{i}", {"ttft.p99": (0.1 * i, "s")}))
            for i in range(16)]
    store = tmp_path / "store"
    prov = history_store.Provenance(commit(0), date(0))
    threads = [threading.Thread(target=history_store.add, args=(store, run, prov))
               for run in runs + runs]  # each run twice, at once
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = history_store.read(store)
    assert sorted(rows["run_id"]) == sorted(f"r{i}" for i in range(16))
    assert not [p for p in store.iterdir() if p.name.startswith(".")]


def test_a_kill_mid_add_leaves_a_temporary_file_that_is_ignored(tmp_path, monkeypatch):
    run = synthetic_run(tmp_path / "r0", {"ttft.p99": (0.5, "s")})
    store = tmp_path / "store"
    store.mkdir()
    final = store / f"{history_store.run_key(Run.read(run))}.parquet"
    (store / f".{final.name}.0badf00d.tmp").write_bytes(b"PAR1\x00half a file")  # SIGKILL
    with pytest.raises(BadInput, match="empty history store"):
        history_store.read(store)

    def interrupted(table, where):
        where.write(b"PAR1 a few bytes")
        raise KeyboardInterrupt  # SIGINT mid-write: the temporary file goes

    monkeypatch.setattr(history_store.pq, "write_table", interrupted)
    assert add(store, run) == 130
    left = [p for p in store.iterdir() if p.name != MARKER]
    assert not final.exists() and len(left) == 1  # the killed add's only
    monkeypatch.undo()
    assert add(store, run) == 0  # the add again completes
    assert len(history_store.read(store)) == 1 and pq.read_table(final).num_rows == 1


def test_provenance_comes_from_the_manifest_or_is_refused(tmp_path, capsys):
    run = synthetic_run(tmp_path / "r0", {"ttft.p99": (0.5, "s")})
    store = str(tmp_path / "store")
    assert main(["history", "add", str(run), "--store", store, "--commit", "abc"]) == 2
    assert "commit date (--date)" in capsys.readouterr().err
    assert main(["history", "add", str(run), "--store", store]) == 2
    assert "commit (--commit) and commit date (--date)" in capsys.readouterr().err
    assert main(["history", "add", str(run), "--store", store, "--commit", "abc", "--date",
                 "yesterday"]) == 2
    assert "'yesterday' is not an ISO 8601 date" in capsys.readouterr().err
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(git_sha="f00d", git_date="2026-12-01")
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main(["history", "add", str(run), "--store", store]) == 0
    rows = history_store.read(tmp_path / "store")
    assert set(rows["commit"]) == {"f00d"}
    assert set(rows["commit_date"]) == {"2026-12-01T00:00:00+00:00"}


def test_an_incomplete_run_is_refused_and_nothing_written(tmp_path, capsys):
    synthetic_run(tmp_path / "runs" / "a", {"ttft.p99": (0.5, "s")})
    synthetic_run(tmp_path / "runs" / "b", {"ttft.p99": (0.5, "s")}, complete=False)
    assert add(tmp_path / "store", tmp_path / "runs") == 2
    assert "not complete" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_show_summarises_the_runs_of_a_commit_in_commit_order(tmp_path, capsys):
    store = history(tmp_path, [[{"ttft.p99": v} for v in (0.4, 0.5, 0.9)],
                               [{"ttft.p99": 0.3}]])
    capsys.readouterr()
    assert main(["history", "show", "--store", str(store), "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert series["metric"] == "ttft" and series["unit"] == "s"
    assert [(c["commit"], c["runs"], c["median"], c["min"], c["max"])
            for c in series["commits"]] == [(commit(0), 3, 0.5, 0.4, 0.9),
                                            (commit(1), 1, 0.3, 0.3, 0.3)]
    assert main(["history", "show", "--store", str(store), "--csv"]) == 0
    csv = capsys.readouterr().out.splitlines()
    assert csv[0].split(",") == history_series.COLUMNS and len(csv) == 3
    assert main(["history", "show", "--store", str(store), "--metric", "ttft"]) == 0
    assert "ttft.p99 [synthetic" in capsys.readouterr().out


def test_show_filters_by_label_and_refuses_what_it_cannot_read(tmp_path, capsys):
    store = str(history(tmp_path, [[{"ttft.p99": 0.4}], [{"ttft.p99": 0.5}]]))
    capsys.readouterr()
    assert main(["history", "show", "--store", store, "--where", f"commit={commit(1)}",
                 "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert [c["commit"] for c in series["commits"]] == [commit(1)]
    for bad in (["--where", "colour=red"], ["--where", "modeled=true"], ["--metric", "x.p50"]):
        assert main(["history", "show", "--store", store, *bad]) == 2
    assert main(["history", "show", "--store", str(tmp_path / "nowhere")]) == 2


@needs_otava
def test_a_ten_percent_step_is_found_at_its_commit_in_the_worse_direction(tmp_path):
    rows = history_store.read(history(tmp_path, stepped(np.random.default_rng(7))))
    points = change_points.detect(history_series.series(rows))
    assert len(points) == 2  # one per metric
    for p in points:
        assert (p.commit_before, p.commit_after) == (commit(5), commit(6))
        assert p.regression and p.pvalue < change_points.MAX_PVALUE
    by_metric = {p.series["metric"]: p for p in points}
    assert by_metric["ttft"].direction == "higher"
    assert by_metric["ttft"].change_pct == pytest.approx(10, abs=2)
    assert by_metric["throughput"].direction == "lower"
    assert by_metric["throughput"].change_pct == pytest.approx(-9.1, abs=2)


@needs_otava
def test_a_step_in_the_better_direction_is_a_change_not_a_regression(tmp_path):
    rows = history_store.read(history(tmp_path, stepped(np.random.default_rng(7), step=-0.1)))
    points = change_points.detect(history_series.series(rows))
    assert len(points) == 2 and not any(p.regression for p in points)


@needs_otava
def test_a_flat_noisy_series_has_no_change_point(tmp_path):
    rows = history_store.read(history(tmp_path, stepped(np.random.default_rng(3), step=0.0,
                                                        noise=0.02)))
    assert change_points.detect(history_series.series(rows)) == []


@needs_otava
def test_detect_exits_1_on_a_regression_at_or_after_since_and_0_before(tmp_path, capsys):
    store = str(history(tmp_path, stepped(np.random.default_rng(7))))
    capsys.readouterr()
    assert main(["history", "detect", "--store", store, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["regressions"] == 2 and len(out["change_points"]) == 2
    point = out["change_points"][0]
    assert point["commit_after"] == commit(6) and point["workload"] == "synthetic"
    assert set(point) >= {"commit_before", "mean_before", "mean_after", "change_pct",
                          "pvalue", "direction", "regression"}
    assert main(["history", "detect", "--store", store, "--since", commit(6)[:4]]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert main(["history", "detect", "--store", store, "--since", commit(7), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regressions"] == 0
    assert main(["history", "detect", "--store", store, "--metric", "ttft.p50"]) == 2
    assert main(["history", "detect", "--store", store, "--since", "feed"]) == 2
    assert main(["history", "detect", "--store", store, "--max-pvalue", "2"]) == 2


@needs_otava
def test_detect_exits_0_on_a_flat_history(tmp_path, capsys):
    store = str(history(tmp_path, stepped(np.random.default_rng(3), n=8, step=0.0)))
    capsys.readouterr()
    assert main(["history", "detect", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == dict(
        since=None, max_pvalue=0.001, min_segment=change_points.MIN_SEGMENT,
        noise_floors=dict(change_points.NOISE_FLOORS, host=None), min_change=0.0,
        too_short=2, not_judged=0, non_finite=0, regressions=0, change_points=[])


def test_store_that_is_a_file_or_holds_a_foreign_file_is_bad_input(tmp_path):
    (tmp_path / "file").write_text("x")
    run = synthetic_run(tmp_path / "r0", {"ttft.p99": (0.5, "s")})
    assert add(tmp_path / "file", run) == 2
    store = tmp_path / "store"
    assert add(store, run) == 0
    pd.DataFrame({"x": [1]}).to_parquet(store / "other.parquet")
    with pytest.raises(BadInput, match="other.parquet: not a history file"):
        history_store.read(store)


def test_a_fifo_in_the_store_is_named_never_opened(tmp_path):
    run = synthetic_run(tmp_path / "r0", {"ttft.p99": (0.5, "s")})
    store = tmp_path / "store"
    assert add(store, run) == 0
    os.mkfifo(store / "pipe.parquet")
    with pytest.raises(BadInput, match="pipe.parquet: is a FIFO"):
        history_store.read(store)


def test_detect_without_otava_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    store = str(history(tmp_path, [[{"ttft.p99": 0.4}], [{"ttft.p99": 0.5}]]))
    monkeypatch.setitem(sys.modules, "otava.analysis", None)
    assert main(["history", "detect", "--store", store]) == 2
    assert "pip install --no-deps apache-otava==0.8.0" in capsys.readouterr().err


def bench_json(path, medians, at=0, commit_info=True):
    """A pytest-benchmark JSON file (--benchmark-json, 5.x) of {name: median seconds},
    measured at commit `at`."""
    benchmarks = [dict(group=None, name=name, fullname=f"tests/bench/test_x.py::{name}",
                       params=None, param=None, extra_info={}, options=dict(min_rounds=5),
                       stats=dict(min=m * 0.9, max=m * 1.2, mean=m, median=m, rounds=9))
                  for name, m in medians.items()]
    data = dict(machine_info=dict(node="bench-host", python_implementation="CPython",
                                  python_version="3.11.2", cpu=dict(brand_raw="AMD EPYC")),
                commit_info=dict(id=commit(at), time=date(at), dirty=False, branch="main"),
                benchmarks=benchmarks, datetime=f"2026-12-{at + 1:02d}T09:00:00+00:00",
                version="5.3.1")
    if not commit_info:
        del data["commit_info"]
    path.write_text(json.dumps(data))
    return path


def test_a_benchmark_file_adds_one_metric_per_benchmark_at_its_commit(tmp_path, capsys):
    store = tmp_path / "store"
    bench = bench_json(tmp_path / "b.json", {"test_round[cpp-64]": 5e-6, "test_round[1.5]": 2e-3})
    run = synthetic_run(tmp_path / "r0", {"ttft.p99": (0.5, "s")})
    assert main(["history", "add", str(run), "--bench", str(bench), "--store", str(store),
                 "--commit", commit(0), "--date", date(0)]) == 0
    capsys.readouterr()
    assert main(["history", "add", "--bench", str(bench), "--store", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already_there"] == [str(bench)]
    rows = history_store.read(store)
    of_bench = rows[rows["workload"] == history_bench.WORKLOAD].sort_values("metric")
    assert list(of_bench["metric"]) == ["test_round[1.5]", "test_round[cpp-64]"]
    assert set(of_bench["stat"]) == {"median"} and set(of_bench["unit"]) == {"s"}
    assert list(of_bench["value"]) == [2e-3, 5e-6]
    row = of_bench.iloc[0]
    assert (row["commit"], row["commit_date"], row["host"], row["device"]) == (
        commit(0), date(0), "bench-host", "AMD EPYC")
    capsys.readouterr()
    assert main(["history", "show", "--store", str(store), "--metric", "test_round[1.5].median",
                 "--json"]) == 0  # a dot in the benchmark's name
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert series["metric"] == "test_round[1.5]"


def test_a_benchmark_file_without_commit_info_needs_commit_and_date(tmp_path, capsys):
    bench = bench_json(tmp_path / "b.json", {"t": 1e-3}, commit_info=False)
    store = str(tmp_path / "store")
    assert main(["history", "add", "--bench", str(bench), "--store", store]) == 2
    assert "commit (--commit) and commit date (--date)" in capsys.readouterr().err
    (tmp_path / "x.json").write_text('{"benchmarks": [{"name": "t", "stats": {}}]}')
    assert main(["history", "add", "--bench", str(tmp_path / "x.json"), "--store", store,
                 "--commit", "c", "--date", "2026-12-01"]) == 2
    assert "stats.median" in capsys.readouterr().err
    assert main(["history", "add", "--store", store]) == 2
    assert not (tmp_path / "store").exists()
    assert main(["history", "add", "--bench", str(bench), "--store", store, "--commit", "c",
                 "--date", "2026-12-01"]) == 0


@needs_otava
def test_a_slower_benchmark_is_a_regression(tmp_path, capsys):
    rng = np.random.default_rng(7)
    store = str(tmp_path / "store")
    for i in range(12):
        m = 5e-6 * (1.2 if i >= 6 else 1.0) * (1 + 0.01 * rng.standard_normal())
        bench = bench_json(tmp_path / f"b{i}.json", {"test_round[cpp-64]": m}, at=i)
        assert main(["history", "add", "--bench", str(bench), "--store", store]) == 0
    capsys.readouterr()
    assert main(["history", "detect", "--store", store, "--since", commit(3), "--json"]) == 1
    (point,) = json.loads(capsys.readouterr().out)["change_points"]
    assert point["commit_after"] == commit(6) and point["direction"] == "higher"
    assert point["regression"] and point["workload"] == "pytest-benchmark"
