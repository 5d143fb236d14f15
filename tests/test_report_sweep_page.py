"""The sweep page and its summary.md as a person reads them: a point whose capacity search
found no capacity has no answer (on no front, not counted with the answers, listed with its
outcome, group and why), and a level no point of a group meets is told apart from a measure the
group's points lack (no TDP published: no power, so no tokens per kW)."""

import os

import pytest

from harness.analysis.report.figures import fronts
from harness.analysis.report.sweep_data import read_sweep
from harness.commands import main
from harness.record.table_sink import write_table
from harness.sweeps.points.table import table
from tests.test_bad_input_cli import steptrace
from tests.test_show import TAMPERED, tampered
from tests.test_sweep_fronts import B200, H200, POINTS, row, sweep_folder


def too_short(seqs):
    """A capacity point that ran, whose answer missed the target on a trace twice as long."""
    return dict(row(B200, seqs, 200, 5000, 1000), outcome="trace_too_short")


def test_a_point_without_a_capacity_is_not_done(tmp_path):
    folder = sweep_folder(tmp_path, [too_short(32)])
    sweep = read_sweep(folder)
    unfound = sweep.rows[sweep.rows["point"] == "b20032"].iloc[0]
    assert unfound["state"] == "no answer" and unfound["status"] == "done"  # as the table
    assert not sweep.fronts("output_tokens_per_device")[unfound.name]
    assert "Hollow triangles on the x axis: 1 point(s) whose capacity search found no " \
        "capacity" in fronts.draw(sweep, "output_tokens_per_device").caption
    assert main(["report", str(folder), "-o", str(tmp_path / "page")]) == 0
    summary = (tmp_path / "page" / "summary.md").read_text()
    assert "9 points: 8 with an answer, 1 found no answer (trace_too_short: 1); fronts by " \
           "device." in summary
    listed = summary.partition("### Points without an answer")[2]
    assert "| no answer (trace_too_short) | modeled:B200 | max_num_seqs=32 | no capacity: " \
           "the answer misses" in listed
    assert "5,000" not in summary  # its tokens per device are no group's best
    html = (tmp_path / "page" / "index.html").read_text()
    assert "8 with an answer, 1 found no answer" in html and 'data-status="no answer"' in html


def test_a_level_without_power_says_no_tdp_is_published(tmp_path):
    """H200's points have no power (its profile publishes no TDP): its per-kW cells say
    that, not that no point meets the level; a level no point reaches still says so."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    rows = [row(*p) if p[0] == B200 else dict(row(*p), power_w=None, power_source=None)
            for p in POINTS]
    write_table(table(rows, {}), folder, "sweep", "parquet")
    best = {(b.group, b.level): b.label
            for b in read_sweep(folder, levels=(20, 1000)).best("output_tokens_per_kw")}
    assert best[H200, 20] == ("no power figure: no TDP (tdp_w, idle_w) is published in the "
                              f"profile of {H200}, and its runs measured no power")
    assert best[B200, 20].startswith("max_num_seqs=")
    assert best[H200, 1000] == best[B200, 1000] == "no point meets the level"


@pytest.mark.parametrize("column, values, words", TAMPERED)
def test_a_sweep_table_holding_another_kind_than_declared_is_no_page(
        tmp_path, capsys, column, values, words):
    """The same check as `show`'s (tests/test_show.py); nothing written (steptrace checks)."""
    folder = tampered(tmp_path, column, values)
    page = tmp_path / "page"
    steptrace(capsys, ["report", folder, "-o", page], 2,
              f"{folder / 'sweep.parquet'}: {words}", root=tmp_path)


def test_a_sweep_table_that_is_a_fifo_is_named_not_its_points_read(tmp_path, capsys):
    """Not a folder of runs either: its points' runs are not reported in its stead."""
    folder = sweep_folder(tmp_path)
    (folder / "sweep.parquet").unlink()
    os.mkfifo(folder / "sweep.parquet")
    run = folder / "points" / "p1" / "run"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    steptrace(capsys, ["report", folder, "-o", tmp_path / "page"], 2,
              f"{folder / 'sweep.parquet'}: is a FIFO (named pipe), not a regular file",
              root=tmp_path)


def test_a_search_table_that_is_a_fifo_is_named_not_passed_over(tmp_path, capsys):
    """A capacity search's folder read as runs: its table is read, not its folder searched."""
    folder = tmp_path / "search"
    folder.mkdir()
    os.mkfifo(folder / "capacity.parquet")
    steptrace(capsys, ["report", folder, "-o", tmp_path / "page"], 2,
              f"{folder / 'capacity.parquet'}: is a FIFO (named pipe), not a regular file",
              root=tmp_path)
