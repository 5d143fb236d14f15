"""A sweep's folder and its life (docs/sweeps.md, "The sweep's folder"): one owner at a
time, checked before any point runs (its name, a file in its place, a read-only file
system), a malformed point.json run again, a sweep that plans nothing refused, the table
that cannot be written at the end (exit 1, the points kept), no-capacity points shown as
what they are, and the progress line's pace. Points run in this process (quick)."""

import errno
import fcntl
import json
import os
from concurrent.futures import Executor, Future
from contextlib import contextmanager

import pytest

from harness.commands import main
from harness.sweeps.points import marker, owner, pool
from harness.sweeps.points.execute import plan
from tests.helpers import ENOSPC
from tests.test_sweep_points import sweep_file

GRID = "base: base.yaml\naxes:\n  device: [modeled:B200, modeled:H200]\n"


class InProcess(Executor):
    def submit(self, fn, *args, **kwargs):
        future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


@pytest.fixture(autouse=True)
def in_process(monkeypatch):
    """The host's pool replaced by this process: each point runs as it is submitted."""
    @contextmanager
    def here(workers):
        yield InProcess()
    monkeypatch.setattr(pool, "host_pool", here)


def sweep(tmp_path, *args, text=GRID):
    return main(["sweep", str(sweep_file(tmp_path, text)), "--set",
                 f"output={tmp_path / 'out'}", *args])


def test_a_second_sweep_into_a_folder_in_use_is_refused_naming_the_owner(tmp_path, capsys):
    folder = tmp_path / "out" / "s"
    with owner.owned(folder):  # as a running sweep holds it
        assert sweep(tmp_path, "--json") == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1
        assert f"{folder} is in use by another sweep (pid {os.getpid()} on " in err
        assert json.loads(out)["exit_code"] == 2
        assert not (folder / "points").exists()  # nothing ran, nothing removed
    assert sweep(tmp_path) == 0  # the owner gone, its lock is no obstacle
    assert (folder / "sweep.parquet").is_file()


def test_a_lock_left_by_a_dead_sweep_does_not_block_its_resume_which_holds_it(
        tmp_path, monkeypatch):
    """The file names a dead pid, but no process holds its lock: the resume takes it, and
    holds it, naming itself, while each of its points runs."""
    folder = tmp_path / "out" / "s"
    folder.mkdir(parents=True)
    (folder / owner.LOCK).write_text("pid 999999999 on elsewhere\n")  # no process holds it
    run, seen = pool.run_unless_stopped, []

    def watched(point):
        fd = os.open(folder / owner.LOCK, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        seen.append((folder / owner.LOCK).read_text())
        return run(point)
    monkeypatch.setattr(pool, "run_unless_stopped", watched)
    assert sweep(tmp_path) == 0
    assert len(seen) == 2 and all(text.startswith(f"pid {os.getpid()} on ") for text in seen)


@pytest.mark.parametrize("content, why", [
    ('{"status": "done"}', "no 'reason' key"),
    ("[1, 2]", "a JSON list, not an object"),
    (None, "rate: expected a number or null, got 'fast'"),
    ('{"status": "do', "not JSON"),
])
def test_a_malformed_point_json_is_an_incomplete_point_and_runs_again(tmp_path, capsys,
                                                                      content, why):
    assert sweep(tmp_path) == 0
    point = plan(sweep_file(tmp_path, GRID), (f"output={tmp_path / 'out'}",)).unique[0]
    path = point.folder / marker.MARKER
    row = json.loads(path.read_text())
    path.write_text(content or json.dumps(dict(row, rate="fast")))
    capsys.readouterr()
    assert sweep(tmp_path, "--json") == 0
    out, err = capsys.readouterr()
    assert err.count(f"{path}: {why}") == 1 and err.count("steptrace: note:") == 1
    result = json.loads(out)
    assert (result["done"], result["skipped"]) == (2, 1)
    assert marker.read(point.folder) is not None  # ran again: its row whole
    assert len(list((point.folder / "base").iterdir())) == 1


def test_a_sweep_whose_where_holds_for_no_point_exits_2_before_anything(tmp_path, capsys):
    assert sweep(tmp_path, "--json", text=GRID + "where: device == 'modeled:A100'\n") == 2
    out, err = capsys.readouterr()
    assert err == ("steptrace: error: " + str(tmp_path / "s.yaml") + ": nothing to run: "
                   "where: \"device == 'modeled:A100'\" holds for no point\n")
    assert json.loads(out)["exit_code"] == 2 and not (tmp_path / "out").exists()


def test_a_sweep_whose_every_point_is_refused_exits_2_before_anything(tmp_path, capsys):
    text = "base: base.yaml\naxes: {engine.num_kv_blocks: [0, -1]}\n"
    assert sweep(tmp_path, text=text) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and err[-1].startswith(
        f"steptrace: error: {tmp_path / 's.yaml'}: nothing to run: every point is refused "
        f"(2; the first: --set 'engine.num_kv_blocks=0': engine.num_kv_blocks")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, said", [
    ("x" * 300, "has a component of 300 bytes (xxxxxxxxxxxxxxxxxxxxxxxx...), longer than a "
                "file name can be (255 bytes)"),
    ('"a\\0b"', "holds a NUL byte"),
])
def test_a_sweep_name_no_file_system_holds_exits_2_before_anything(tmp_path, capsys, name,
                                                                   said):
    assert sweep(tmp_path, text=f"name: {name}\n" + GRID) == 2
    err = capsys.readouterr().err
    assert err.startswith("steptrace: error: the sweep's folder ") and said in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_a_sweep_folder_that_is_a_file_exits_2_before_anything(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "s").write_text("mine")
    assert sweep(tmp_path) == 2
    assert capsys.readouterr().err == (f"steptrace: error: the sweep's folder "
                                       f"{tmp_path / 'out' / 's'} exists and is not a "
                                       f"directory\n")
    assert (tmp_path / "out" / "s").read_text() == "mine"


@pytest.mark.parametrize("what", ["points folder", "point's folder"])
def test_a_file_in_the_place_of_points_or_a_point_exits_2_before_anything(tmp_path, capsys,
                                                                           what):
    """Every point used to fail with a raw NotADirectoryError, and a table was written."""
    folder = tmp_path / "out" / "s"
    path = folder / "points" if what == "points folder" else \
        plan(sweep_file(tmp_path, GRID), (f"output={tmp_path / 'out'}",)).unique[1].folder
    path.parent.mkdir(parents=True)
    path.write_text("mine")
    assert sweep(tmp_path, "--json") == 2
    out, err = capsys.readouterr()
    assert err == f"steptrace: error: the sweep's {what} {path} exists and is not a directory\n"
    assert json.loads(out)["exit_code"] == 2
    assert path.read_text() == "mine" and not (folder / "sweep.parquet").exists()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no point ran


def test_a_sweep_on_a_read_only_file_system_exits_2_before_anything(tmp_path, capsys,
                                                                     monkeypatch):
    opened = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).endswith(owner.LOCK):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return opened(path, flags, *args, **kwargs)
    monkeypatch.setattr(owner.os, "open", read_only)
    assert sweep(tmp_path) == 2
    assert capsys.readouterr().err == (f"steptrace: error: cannot write the sweep's folder "
                                       f"{tmp_path / 'out' / 's'}: {owner.LOCK}: Read-only "
                                       f"file system\n")
    assert not (tmp_path / "out" / "s" / "points").exists()


def test_a_table_that_cannot_be_written_exits_1_naming_it_and_keeps_the_points(
        tmp_path, capsys, monkeypatch):
    import pyarrow.parquet as pq

    from harness.record import table_sink

    class FullDisk(pq.ParquetWriter):  # under the sweep's table: the points' are written
        def __init__(self, where, schema, *args, **kwargs):
            super().__init__(where, schema, *args, **kwargs)
            self.full = "pareto" in schema.names

        def write_table(self, *args, **kwargs):
            if self.full:
                raise OSError(errno.ENOSPC, f"Error writing bytes to file. Detail: [errno "
                                            f"28] {ENOSPC}")
            super().write_table(*args, **kwargs)
    writer = table_sink.pq.ParquetWriter
    monkeypatch.setattr(table_sink.pq, "ParquetWriter", FullDisk)
    folder = tmp_path / "out" / "s"
    assert sweep(tmp_path, "--json") == 1
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == (
        f"steptrace: run failed: cannot write {folder / 'sweep.parquet'}: {ENOSPC}; the "
        f"points are kept in {folder / 'points'}: run the sweep again to write the table")
    assert json.loads(out)["exit_code"] == 1
    assert sorted(p.name for p in folder.iterdir()) == [owner.LOCK, "points"]  # no .tmp
    monkeypatch.setattr(table_sink.pq, "ParquetWriter", writer)
    assert sweep(tmp_path, "--json") == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == 2  # nothing ran again


def test_a_point_without_a_capacity_is_shown_as_its_outcome_and_on_no_front(tmp_path,
                                                                             capsys):
    """Each device its own front, so each point alone on it: a point with no capacity is
    on none; a lower bound (at_least) is an answer, said as one."""
    assert sweep(tmp_path) == 0
    bound, short = plan(sweep_file(tmp_path, GRID), (f"output={tmp_path / 'out'}",)).unique
    for point, outcome in ((bound, "at_least"), (short, "trace_too_short")):
        row = json.loads((point.folder / marker.MARKER).read_text())
        marker.write(point.folder, dict(row, outcome=outcome))
    capsys.readouterr()
    assert sweep(tmp_path) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == ("2 points: 1 with an answer (1 a lower bound), 1 found "
                                    "no answer (trace_too_short: 1); 2 skipped (complete "
                                    "before)")
    (shown,) = [line for line in out.splitlines() if line.startswith(short.key)]
    assert shown.split()[1:6] == ["trace_too_short", "-", "-", "-", "-"]  # no figures
    assert not shown.split()[-2] == "*"
    assert "no capacity: the answer misses the target on a trace twice as long" in out
    (shown,) = [line for line in out.splitlines() if line.startswith(bound.key)]
    assert shown.split()[1] == "at_least" and shown.split()[-2] == "*"
    assert "a lower bound: every rate probed met the target" in out
    assert sweep(tmp_path, "--json") == 0
    rows = {r["point"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert (rows[bound.key]["pareto"], rows[short.key]["pareto"]) == (True, False)


def test_progress_lines_say_the_pace_and_the_time_left(tmp_path, capsys):
    assert sweep(tmp_path) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "sweep:" in line]
    assert lines[0].startswith("  sweep: 1 of 2 points: 1 done, 0 skipped (complete), "
                               "0 failed, ") and lines[0].endswith(" s left")
    assert " points/s" in lines[0] and " points/s" in lines[1]


@pytest.mark.parametrize("output", ["&o", "{o}"])
def test_a_relative_output_that_yaml_would_read_otherwise_holds_every_point(
        tmp_path, capsys, monkeypatch, output):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(sweep_file(tmp_path, GRID)), "--set",
                 f"output={json.dumps(output)}", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["done"], result["failed"]) == (2, 0)
    assert (tmp_path / output / "s" / "sweep.parquet").is_file()
    for row in result["rows"]:
        assert marker.read(tmp_path / output / "s" / row["folder"]) is not None


def test_a_long_where_that_fails_is_cut_short_in_its_line(tmp_path, capsys):
    where = " or ".join(["device == 'modeled:A100'"] * 20) + " or engine == 1"
    assert sweep(tmp_path, text=GRID + f"where: {json.dumps(where)}\n") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"({len(repr(where)):,} characters)" in err
    assert "engine is a mapping" in err and len(err) < len(where)


def test_a_ctrl_c_after_the_table_is_written_says_it_is(tmp_path, capsys, monkeypatch):
    from harness.commands import sweep as command

    def interrupted(result):
        raise KeyboardInterrupt
    monkeypatch.setattr(command, "print_text", interrupted)
    assert sweep(tmp_path) == 130
    table = tmp_path / "out" / "s" / "sweep.parquet"
    assert table.is_file()
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"steptrace: interrupted by SIGINT (Ctrl-C): the table is written: {table}")


def test_a_ctrl_c_counts_the_points_complete_on_disk(tmp_path, capsys, monkeypatch):
    """Both points wrote their point.json, the sweep was told of neither before Ctrl-C:
    the line counts what is on disk."""
    run = pool.run_unless_stopped

    def then_ctrl_c(point):
        run(point)
        raise KeyboardInterrupt
    monkeypatch.setattr(pool, "run_unless_stopped", then_ctrl_c)
    assert sweep(tmp_path) == 130
    points = tmp_path / "out" / "s" / "points"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"steptrace: interrupted by SIGINT (Ctrl-C): the table is not written; the 1 of 2 "
        f"points complete so far are kept in {points}: run the sweep again to resume")


def test_a_point_never_removes_a_file_in_its_folders_place(tmp_path):
    """A search's points are drawn as it goes, not checked before: the point refuses."""
    path = tmp_path / "points" / "abc"
    path.parent.mkdir()
    path.write_text("mine")
    with pytest.raises(owner.NotAFolder, match=f"{path} exists and is not a directory"):
        marker.fresh(path)
    assert path.read_text() == "mine"
