"""The history's promises (docs/reliability.md; docs/comparing.md, "History and change
points"): values that are not numbers never hide a change, a run records no other
repository's commit, series span the hosts of a CI's runners, flat histories raise no
alarm, a store is written only where `add` made one and never through a link, and every
failure is one line (with --json, one document)."""

import json
import math
import os
import signal
import subprocess
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.analysis import change_points, history_place, history_series, history_store
from harness.commands import main
from harness.io.one_word import COMMIT_VARIABLES
from harness.record.run import Run
from harness.run import manifest
from tests.bench import history_power as power
from tests.helpers import synthetic_run
from tests.test_history import add, commit, needs_otava, on_gpu
from tests.test_history_commits import WORKLOAD, runs


def run_at(root, i, value, host="host", **kwargs):
    """A synthetic run of ttft.p99 = `value` on `host`, the i-th of `root`."""
    run = synthetic_run(root / f"r{i:02d}", {"ttft.p99": (value, "s")}, **kwargs)
    path = run / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "host": host}))
    return run


def detect(store, capsys, *extra):
    """`history detect --json`: (exit status, its document)."""
    capsys.readouterr()
    status = main(["history", "detect", "--store", str(store), "--json", *extra])
    return status, json.loads(capsys.readouterr().out)


def one_line(capsys, status, got, *words):
    out, err = capsys.readouterr()
    assert got == status, err
    assert err.count("\n") == 1 and "internal error" not in err, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    return err


# NaN and infinities


@needs_otava
def test_values_that_are_not_numbers_are_left_out_and_counted_never_hide_a_step(tmp_path,
                                                                                capsys):
    """1.0 at six commits, NaN and an infinity at two, 2.0 at five: the step is found."""
    store = tmp_path / "store"
    for i, value in enumerate([1.0] * 6 + [math.inf, 1.0] + [2.0] * 5):
        assert add(store, on_gpu(run_at(tmp_path / "runs", i, value)), at=i) == 0
    nan_file = next(p for p in history_store.files(store)
                    if pq.read_table(p).column("commit")[0].as_py() == commit(7))
    table = pq.read_table(nan_file)
    pq.write_table(table.set_column(table.schema.get_field_index("value"), "value",
                                    pa.array([math.nan], pa.float64())), nan_file)
    status, out = detect(store, capsys)
    assert status == 1 and out["non_finite"] == 2
    (point,) = out["change_points"]
    assert (point["commit_before"], point["commit_after"]) == (commit(5), commit(8))
    assert point["change_pct"] == pytest.approx(100) and point["regression"]
    assert main(["history", "detect", "--store", str(store)]) == 1
    assert "2 value(s) left out: not a finite number" in capsys.readouterr().out


# The commit a run records


def git(folder, *args):
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def test_a_package_installed_inside_another_repository_records_none_of_its_commits(
        tmp_path, monkeypatch):
    """A virtual environment inside a project's checkout: the project's HEAD is not the
    harness's commit."""
    for name in COMMIT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / "README").write_text("another project\n")
    git(project, "add", "README")
    git(project, "commit", "-q", "-m", "theirs")
    package = project / ".venv" / "lib" / "site-packages" / "harness" / "run"
    package.mkdir(parents=True)
    installed = package / "manifest.py"
    installed.write_text("# installed\n")
    assert manifest.checkout_commit(installed) == (None, None)
    assert manifest.engine_commit(installed) == (None, None)
    git(project, "add", "-f", str(installed))  # vendored: tracked there, its commit is ours
    git(project, "commit", "-q", "-m", "vendored")
    sha, when = manifest.checkout_commit(installed)
    assert len(sha) == 40 and when[:2] == "20"
    monkeypatch.setenv("STEPTRACE_COMMIT", "f00d")  # CI says which engine it measured
    monkeypatch.setenv("STEPTRACE_COMMIT_DATE", "2026-12-01T00:00:00Z")
    assert manifest.engine_commit(installed) == ("f00d", "2026-12-01T00:00:00Z")


def test_add_without_a_commit_says_how_to_give_one(tmp_path, capsys):
    run = run_at(tmp_path, 0, 0.5)
    got = main(["history", "add", str(run), "--store", str(tmp_path / "store")])
    one_line(capsys, 2, got, "--commit", "STEPTRACE_COMMIT")


# Series across hosts


@needs_otava
def test_a_new_host_per_run_is_one_series_and_the_runner_class_splits_them(tmp_path,
                                                                           capsys,
                                                                           monkeypatch):
    monkeypatch.delenv("STEPTRACE_RUNNER", raising=False)
    store = tmp_path / "store"
    for i in range(12):  # a CI runner's host name is new in every job
        run = on_gpu(run_at(tmp_path / "runs", i, 0.5 if i < 6 else 0.6, host=f"ci-{i}"))
        assert add(store, run, at=i) == 0
    status, out = detect(store, capsys)
    (point,) = out["change_points"]
    assert status == 1 and point["commit_after"] == commit(6)
    assert point["runner"] == ""
    assert point["host"].startswith("ci-0, ci-1, ci-10") and point["host"].endswith("more")
    assert main(["history", "show", "--store", str(store), "--where", "host=ci-3",
                 "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert [c["host"] for c in series["commits"]] == ["ci-3"]

    other = tmp_path / "other"
    monkeypatch.setenv("STEPTRACE_RUNNER", "gpu-a")
    for i in range(12):
        run = run_at(tmp_path / "runs2", i, 0.5 if i < 6 else 0.6, host=f"ci-{i}")
        assert add(other, run, at=i, extra=[] if i % 2 else ["--runner", "gpu-b"]) == 0
    status, out = detect(other, capsys)  # two runner classes of six commits each
    assert status == 0 and out["too_short"] == 2 and out["change_points"] == []
    assert set(history_store.read(other)["runner"]) == {"gpu-a", "gpu-b"}


def test_a_store_file_from_before_the_runner_column_is_read_as_no_runner(tmp_path):
    store = tmp_path / "store"
    assert add(store, run_at(tmp_path / "runs", 0, 0.5), at=0) == 0
    (path,) = history_store.files(store)
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["runner"]), path)
    (path.parent / history_place.MARKER).unlink()  # a store of format 1: no marker either
    assert add(store, run_at(tmp_path / "runs", 1, 0.5), at=1) == 0  # taken as a store
    rows = history_store.read(store)
    assert list(rows["runner"]) == ["", ""] and len(history_series.series(rows)) == 2
    assert (store / history_place.MARKER).is_file()


# False alarms


@needs_otava
def test_two_commits_a_side_of_identical_timings_are_no_change_point():
    """Four identical modeled runs stamped c1 - c4: sched_cpp.min in whole microseconds
    read 0.09, 0.09, 0.08, 0.08 (-10 %, p = 0 from two points a side)."""
    table = power.series_table([0.09, 0.09, 0.08, 0.08], "sched_cpp.min", "us")
    assert change_points.detect(table) == []
    assert change_points.too_short(table) == 1


GPU = dict(device="NVIDIA H100 80GB HBM3", backend="cuda")


@needs_otava
@pytest.mark.parametrize("metric, labels, floor", [
    ("sched_call.p50", {}, "host"),  # the harness's own timing
    ("sched_call.p50", dict(modeled=True), "host"),  # also in a modeled run
    ("host_cpu.mean", dict(modeled=True), "host"),  # a reading of the whole host
    ("ttft.p99", {}, "host"),  # a measured run's clock, the CPU device: the host times it
    ("ttft.p99", dict(backend=""), "host"),  # a store file from before `backend`
    ("ttft.p99", GPU, "device"),  # a measured run's clock on an accelerator
    ("ttft.p99", dict(modeled=True), None),  # a modeled run's virtual clock: exact
    ("attention.mean", {}, "host"),  # a step part measured on the CPU device
    ("attention.mean", GPU, "device"),
    ("attention.mean", dict(modeled=True), None),  # the device model's
    ("test_decode_round[cpp-1024].median", dict(workload="pytest-benchmark"), "bench"),
])
def test_a_change_within_the_metrics_noise_floor_is_not_reported(metric, labels, floor):
    assert change_points.floor_class(dict(power.series_table([1.0], metric, **labels)
                                          .iloc[0])) == floor
    floors = {**change_points.NOISE_FLOORS, "host": 0.5}  # as --noise-floor host=50% sets
    floor_pct = floors[floor] if floor else 0.0
    for step, found in ((floor_pct * 0.8, False), (floor_pct + 0.02, True)):
        if step == 0:
            continue  # exact: no change is within its floor
        table = power.series_table(power.worse(np.full(12, 10.0), "lower", 6, step), metric,
                                   **labels)
        points = change_points.detect(table, floors=floors)
        assert [p.commit_after for p in points] == ([power.commit(6)] if found else [])
        assert all(p.noise_floor == floor_pct for p in points)
        if floor == "host":  # by default the host's figures are not judged, however far
            assert change_points.detect(table) == []  # they move
            assert change_points.not_judged(table) == 1


@needs_otava
def test_the_hosts_figures_are_judged_only_with_a_floor_set_and_min_change_raises_it(
        tmp_path, capsys):
    """A dedicated quiet runner sets the host's floor; --min-change raises every one."""
    store = tmp_path / "store"
    for i in range(12):  # a CPU device's TTFT: timed by the host, 20 % worse from c006
        assert add(store, run_at(tmp_path / "runs", i, 0.5 if i < 6 else 0.6), at=i) == 0
    status, out = detect(store, capsys)
    assert (status, out["change_points"], out["not_judged"]) == (0, [], 1)
    assert out["noise_floors"] == dict(change_points.NOISE_FLOORS, host=None)  # infinite
    capsys.readouterr()
    assert main(["history", "detect", "--store", str(store)]) == 0
    assert "1 series not judged: the host's timings" in capsys.readouterr().out
    status, out = detect(store, capsys, "--noise-floor", "host=10%", "--noise-floor",
                         "device=1")
    (point,) = out["change_points"]
    assert status == 1 and point["commit_after"] == commit(6) and point["noise_floor"] == 0.1
    assert point["backend"] == "cpu" and out["not_judged"] == 0
    assert out["noise_floors"] == {**change_points.NOISE_FLOORS, "host": 0.1, "device": 0.01}
    status, out = detect(store, capsys, "--noise-floor", "host=10", "--min-change", "25")
    assert (status, out["change_points"]) == (0, [])  # raised above the 20 %
    capsys.readouterr()
    assert main(["history", "detect", "--store", str(store), "--noise-floor", "host=10%"]) == 1
    assert "noise floors: host 10%, bench 10%, device 5%" in capsys.readouterr().out
    assert math.isinf(change_points.NOISE_FLOORS["host"])  # the defaults left as they were


@needs_otava
def test_the_trend_page_says_what_it_did_not_judge_and_takes_the_floors_detect_takes(
        tmp_path, capsys):
    store = tmp_path / "store"
    for i in range(12):  # a CPU device's TTFT: the host's, 20 % worse from c006
        assert add(store, run_at(tmp_path / "runs", i, 0.5 if i < 6 else 0.6), at=i) == 0
    assert main(["report", "--history", str(store), "-o", str(tmp_path / "page")]) == 0
    html = (tmp_path / "page" / "index.html").read_text()
    assert "1 series not judged" in html and "No change point in any series judged" in html
    assert "1 series not judged" in (tmp_path / "page" / "summary.md").read_text()
    assert main(["report", "--history", str(store), "-o", str(tmp_path / "set"),
                 "--noise-floor", "host=10%"]) == 0
    html = (tmp_path / "set" / "index.html").read_text()
    assert f'data-after="{commit(6)}"' in html and "not judged" not in html
    assert "--noise-floor host=10%" in (tmp_path / "set" / "report.json").read_text()
    capsys.readouterr()
    got = main(["report", "--history", str(store), "-o", str(tmp_path / "bad"),
                "--noise-floor", "host=-5"])
    one_line(capsys, 2, got, "--noise-floor host=-5")
    assert not (tmp_path / "bad").exists()
    got = main(["report", str(tmp_path / "runs"), "-o", str(tmp_path / "runs-page"),
                "--noise-floor", "host=5"])
    one_line(capsys, 2, got, "--noise-floor", "--history")


@pytest.mark.parametrize("value", ["gpu=5%", "host", "host=", "host=-1%", "host=ten",
                                   "host=nan", "host=inf%", "=5"])
def test_a_bad_noise_floor_is_bad_input_naming_the_option(tmp_path, capsys, value):
    store = tmp_path / "store"
    assert add(store, run_at(tmp_path / "runs", 0, 0.5)) == 0
    capsys.readouterr()
    got = main(["history", "detect", "--store", str(store), "--noise-floor", value])
    one_line(capsys, 2, got, f"--noise-floor {value}", "host, bench, device")
    got = main(["history", "detect", "--store", str(store), "--json", "--noise-floor", value])
    out, _ = capsys.readouterr()
    assert got == 2 and json.loads(out)["exit_code"] == 2


@needs_otava
@pytest.mark.core  # twelve whole runs of the engine, tiny: about 4 s
def test_a_flat_history_of_real_runs_has_no_change_point(tmp_path, capsys):
    """Twelve modeled runs of one build stamped as twelve commits: their virtual clock's
    figures are exact, their host timings move with the host (and the process warming
    up); no series changes."""
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    store = tmp_path / "store"
    for i, run in enumerate(runs(tmp_path, "flat", 12)):
        assert add(store, run, at=i) == 0
    status, out = detect(store, capsys)
    assert (status, out["change_points"]) == (0, [])
    assert out["too_short"] == 0  # judged: twelve commits


# Where add writes


def test_add_never_writes_through_a_link_in_the_store(tmp_path, capsys):
    run = run_at(tmp_path / "runs", 0, 0.5)
    store = tmp_path / "store"
    assert add(store, run_at(tmp_path / "runs", 1, 0.5)) == 0
    elsewhere = tmp_path / "elsewhere.parquet"
    planted = store / f"{history_store.run_key(Run.read(run))}.parquet"
    planted.symlink_to(elsewhere)  # dangling: a write through it would create `elsewhere`
    one_line(capsys, 2, add(store, run), str(planted), "symbolic link")
    assert not elsewhere.exists()
    with pytest.raises(history_store.BadInput, match="symbolic link"):
        history_store.read(store)
    planted.unlink()
    linked = tmp_path / "linked"
    linked.symlink_to(store)
    one_line(capsys, 2, add(linked, run), str(linked), "symbolic link")


def test_add_refuses_a_run_folder_or_a_folder_it_did_not_make(tmp_path, capsys):
    a, b = run_at(tmp_path, 0, 0.5), run_at(tmp_path, 1, 0.5)
    before = sorted(p.name for p in a.iterdir())
    one_line(capsys, 2, add(a, b), str(a), "not a history store", "run folder")
    assert sorted(p.name for p in a.iterdir()) == before
    one_line(capsys, 2, add(tmp_path, b), "holds the run")  # the runs' own folder
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("x")
    one_line(capsys, 2, add(notes, b), str(notes), "not a history store", "todo.txt")
    (notes / "todo.txt").unlink()
    (notes / ".git").write_text("gitdir: elsewhere\n")  # a worktree of the store's branch
    assert add(notes, b) == 0 and json.loads((notes / history_place.MARKER).read_text())[
        "kind"] == history_place.KIND
    (notes / history_place.MARKER).write_text('{"kind": "something else"}')
    one_line(capsys, 2, add(notes, a), history_place.MARKER, "not a history store's marker")


# The bug line where one line was promised


def test_a_date_beyond_the_years_utc_holds_is_bad_input(tmp_path, capsys):
    run = run_at(tmp_path, 0, 0.5)
    got = main(["history", "add", str(run), "--store", str(tmp_path / "store"), "--commit",
                "c", "--date", "9999-12-31T23:59:59-23:59"])
    one_line(capsys, 2, got, "--date", "9999-12-31T23:59:59-23:59", "0001-01-01", "9999-12-31")
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("column, values, words", [
    ("value", pa.array(["abc"]), ["column value, row 1 of 1", "'abc'", "double"]),
    ("host", pa.array([None], pa.string()), ["column host, row 1 of 1", "null"]),
    ("modeled", pa.array([None], pa.bool_()), ["column modeled, row 1 of 1", "null"]),
    ("commit", pa.array([[1, 2]]), ["column commit, row 1 of 1", "[1, 2]"]),
])
def test_a_store_file_of_the_wrong_types_names_file_column_row_and_value(tmp_path, capsys,
                                                                         column, values,
                                                                         words):
    store = tmp_path / "store"
    assert add(store, run_at(tmp_path / "runs", 0, 0.5)) == 0
    (path,) = history_store.files(store)
    table = pq.read_table(path)
    pq.write_table(table.set_column(table.schema.get_field_index(column), column, values),
                   path)
    for command in ("show", "detect"):
        got = main(["history", command, "--store", str(store)])
        one_line(capsys, 2, got, str(path), *words)


# --json after a signal


def test_json_after_ctrl_c_or_sigterm_is_one_document(tmp_path, capsys, monkeypatch):
    store = tmp_path / "store"
    assert add(store, run_at(tmp_path / "runs", 0, 0.5)) == 0

    def ctrl_c(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(history_store.pq, "write_table", ctrl_c)
    capsys.readouterr()
    assert add(store, run_at(tmp_path / "runs", 1, 0.5), extra=["--json"]) == 130
    out, err = capsys.readouterr()
    assert json.loads(out) == dict(error="interrupted", message="interrupted by SIGINT "
                                   "(Ctrl-C)", exit_code=130)
    assert err == "steptrace: interrupted by SIGINT (Ctrl-C)\n"

    def terminated(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises before this ends
    monkeypatch.setattr(history_series, "series", terminated)
    assert main(["history", "detect", "--store", str(store), "--json"]) == 143
    out, err = capsys.readouterr()
    assert json.loads(out)["exit_code"] == 143 and err.count("\n") == 1


# A store's dates, scale and markers; what add is given (issue 42's second audit)


def store_of(tmp_path, values, name="store"):
    """A store of one modeled run's ttft.p99 per commit (exact: any change is judged), the
    i-th at `values[i]`, written file by file as add writes them."""
    store = tmp_path / name
    assert add(store, run_at(tmp_path / f"{name}-run", 0, 0.5, modeled=True)) == 0
    (first,) = history_store.files(store)
    table = pq.read_table(first)
    first.unlink()
    for i, value in enumerate(values):
        key = f"{i:032x}"
        for column, new in (("run_key", key), ("commit", commit(i)),
                            ("commit_date", f"2026-11-{i + 1:02d}T12:00:00+00:00"),
                            ("value", value)):
            at = table.schema.get_field_index(column)
            table = table.set_column(at, column, pa.array([new] * table.num_rows,
                                                          table.schema.field(column).type))
        pq.write_table(table, store / f"{key}.parquet")
    return store


def set_column(path, column, value):
    table = pq.read_table(path)
    at = table.schema.get_field_index(column)
    pq.write_table(table.set_column(at, column, pa.array([value] * table.num_rows)), path)


def test_a_commit_date_that_is_not_a_date_names_file_column_row_and_value(tmp_path, capsys):
    store = store_of(tmp_path, [0.5] * 6 + [0.6] * 6)
    path = history_store.files(store)[3]
    set_column(path, "commit_date", "nope")
    for command in ("show", "detect"):
        got = main(["history", command, "--store", str(store)])
        one_line(capsys, 2, got, str(path), "column commit_date, row 1 of 1", "'nope'",
                 "ISO 8601")
    set_column(path, "commit_date", "2026-11-04T17:00:00+05:00")  # another zone: as UTC
    assert main(["history", "show", "--store", str(store), "--json"]) == 0
    (series,) = json.loads(capsys.readouterr().out)["series"]
    assert [c["commit_date"] for c in series["commits"]][3] == "2026-11-04T12:00:00+00:00"


@needs_otava
@pytest.mark.parametrize("big", [1e308, 1e-300])
def test_values_near_the_largest_double_or_the_smallest_hide_no_change(tmp_path, capsys,
                                                                       big):
    store = store_of(tmp_path, [big] * 6 + [-big] * 6)
    status, out = detect(store, capsys)
    (point,) = out["change_points"]
    assert status == 0 and point["commit_after"] == commit(6)  # lower: better
    assert (point["mean_before"], point["mean_after"]) == (big, -big)
    assert point["change_pct"] == pytest.approx(-200)


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1000.5", "1e400"])
def test_a_min_change_that_is_not_a_percentage_of_0_to_1000_is_refused(tmp_path, capsys,
                                                                        value):
    store = store_of(tmp_path, [0.5])
    got = main(["history", "detect", "--store", str(store), "--min-change", value])
    one_line(capsys, 2, got, f"--min-change {float(value):g}", "0 to 1000")


@needs_otava
def test_a_min_change_of_1000_percent_is_taken(tmp_path, capsys):
    store = store_of(tmp_path, [0.5] * 6 + [0.6] * 6)
    status, out = detect(store, capsys, "--min-change", "1000")
    assert (status, out["change_points"], out["min_change"]) == (0, [], 10)


@pytest.mark.parametrize("option, value", [
    ("--commit", ""), ("--commit", "c1\nc2"), ("--commit", "c1\x1b[2J"), ("--commit", "c 1"),
    ("--runner", ""), ("--runner", "gpu\na"), ("--runner", "gpu a"),
])
def test_an_empty_commit_or_runner_or_one_with_control_characters_is_refused(
        tmp_path, capsys, option, value):
    run = run_at(tmp_path, 0, 0.5)
    path = run / "manifest.json"  # what --commit "" would otherwise fall back on
    path.write_text(json.dumps({**json.loads(path.read_text()), "git_sha": "f00d"}))
    args = dict([("--commit", commit(0)), ("--runner", "gpu-a"), (option, value)])
    got = main(["history", "add", str(run), "--store", str(tmp_path / "store"), "--date",
                "2026-11-01", *[x for item in args.items() for x in item]])
    one_line(capsys, 2, got, option, "control character or white space"
             if value else "empty")
    assert not (tmp_path / "store").exists()


def test_a_commit_from_the_environment_or_a_manifest_is_checked_as_given(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.setenv("STEPTRACE_COMMIT", "f00d\n")
    with pytest.raises(history_store.BadInput, match="STEPTRACE_COMMIT.*control character"):
        manifest.engine_commit()
    monkeypatch.setenv("STEPTRACE_RUNNER", "gpu\x1ba")
    run = run_at(tmp_path, 0, 0.5)
    got = main(["history", "add", str(run), "--store", str(tmp_path / "store"), "--commit",
                "c", "--date", "2026-11-01"])
    one_line(capsys, 2, got, "STEPTRACE_RUNNER", "control character")
    monkeypatch.delenv("STEPTRACE_RUNNER")
    path = run / "manifest.json"  # a run recorded before the check
    path.write_text(json.dumps({**json.loads(path.read_text()), "git_sha": "f00d\nx",
                                "git_date": "2026-11-01"}))
    got = main(["history", "add", str(run), "--store", str(tmp_path / "store")])
    one_line(capsys, 2, got, str(run), "git_sha", "control character")
    assert not (tmp_path / "store").exists()


def test_add_refuses_a_marked_store_holding_a_file_it_did_not_write(tmp_path, capsys):
    store = store_of(tmp_path, [0.5])
    (store / "README.txt").write_text("our benchmarks\n")
    before = sorted(p.name for p in store.iterdir())
    one_line(capsys, 2, add(store, run_at(tmp_path / "runs", 1, 0.5)), str(store),
             "README.txt", "move it out first")
    assert sorted(p.name for p in store.iterdir()) == before


def test_add_refuses_a_store_with_a_file_cut_short_before_writing(tmp_path, capsys):
    store = store_of(tmp_path, [0.5, 0.5])
    path = history_store.files(store)[1]
    path.write_bytes(path.read_bytes()[:-100])
    before = sorted(p.name for p in store.iterdir())
    one_line(capsys, 2, add(store, run_at(tmp_path / "runs", 1, 0.5)), str(path))
    assert sorted(p.name for p in store.iterdir()) == before


@pytest.mark.parametrize("marker", ["[1, 2]", "fifo"])
def test_reading_refuses_a_marker_that_is_not_one_as_add_does(tmp_path, capsys, marker):
    store = store_of(tmp_path, [0.5])
    path = store / history_place.MARKER
    path.unlink()
    if marker == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(marker)
    for command in ("show", "detect"):
        got = main(["history", command, "--store", str(store)])
        one_line(capsys, 2, got, str(path), "not a history store's marker")
    one_line(capsys, 2, add(store, run_at(tmp_path / "runs", 1, 0.5)), str(path),
             "not a history store's marker")


@needs_otava
def test_a_change_from_0_is_said_as_one_without_a_percentage(tmp_path, capsys):
    store = store_of(tmp_path, [0.0] * 6 + [1.0] * 6)
    status, out = detect(store, capsys)
    (point,) = out["change_points"]
    assert status == 1 and point["change_pct"] is None and point["mean_before"] == 0
    assert main(["history", "detect", "--store", str(store)]) == 1
    text = capsys.readouterr().out
    assert "0 -> 1 (from 0)" in text and "nan" not in text


def test_a_store_file_whose_commit_is_not_one_word_is_refused_on_reading(tmp_path, capsys):
    store = store_of(tmp_path, [0.5, 0.5])
    path = history_store.files(store)[1]
    set_column(path, "commit", "c1\nREGRESSION")  # a forged row in show's table
    got = main(["history", "show", "--store", str(store)])
    one_line(capsys, 2, got, str(path), "column commit, row 1 of 1", "control character")


def test_a_bad_commit_in_the_environment_is_refused_before_a_run_starts(tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.setenv("STEPTRACE_COMMIT", "f00d bad")
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD)
    got = main(["run", str(workload), "--set", f"output={tmp_path / 'out'}"])
    one_line(capsys, 2, got, "$STEPTRACE_COMMIT", "white space")
    assert not (tmp_path / "out").exists()
