"""steptrace report: one page, a Markdown summary and figures from run folders, written
whole or not at all; the GIL and hardware sections where the arms differ by those; bad
input named, exit 2."""

import json
import re

import numpy as np
import pytest

from harness.analysis.report.timeline import BINS, binned, cdf_points
from harness.commands import main
from tests.helpers import modeled_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    released, held = modeled_runs(root / "gil", "gil=both")
    (b200,) = modeled_runs(root / "b200", "device=modeled:B200")
    return dict(released=released, held=held, b200=b200, sweep=root / "gil")


@pytest.fixture(scope="module")
def one(runs, tmp_path_factory):
    """The report of one run whose device table has readings (a modeled run this short
    has none: the sampler's first reading comes after its end)."""
    import shutil

    import pandas as pd

    from harness.schema import TABLES
    from harness.table_sink import write_table

    root = tmp_path_factory.mktemp("one")
    run = root / "run"
    shutil.copytree(runs["released"], run)
    t = np.arange(20) * 0.1
    device = pd.DataFrame({c: np.full(40, np.nan) for c in TABLES["device"].names})
    device["t_s"], device["source"] = np.r_[t, t], ["nvml"] * 20 + ["cpu"] * 20
    device["device"] = [0] * 20 + [-1] * 20
    device.loc[:19, "util_pct"], device.loc[:19, "power_w"] = 80.0, 600.0
    device.loc[20:, "host_cpu_pct"] = 50.0
    write_table(device, run, "device", "parquet",
                dict(run_id=run.name, gil_mode="released", overlap=False))
    assert main(["report", str(run), "-o", str(root / "r"), "--json"]) == 0
    return root / "r"


def report(capsys, argv, status=0):
    assert main(["report", *map(str, argv), "--json"]) == status
    out = capsys.readouterr()
    return json.loads(out.out) if status == 0 else out.err


def test_one_run_gives_a_self_contained_page_summary_and_figures(one):
    page = (one / "index.html").read_text()
    pngs = sorted((one / "figures").glob("*.png"))
    assert len(pngs) == 9
    assert page.count('<img ') == len(pngs) == page.count('src="data:image/png;base64,')
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing fetched, no link out
    titles = re.findall(r"<figure [^>]*><h3>(.*?)</h3>", page)
    assert len(titles) == 9 and all('class="badge modeled">modeled' in t for t in titles)
    for name in ("latency_cdf", "itl", "load", "tokens_per_step", "step_time", "batch_shapes",
                 "compute", "device", "prompt_vs_ttft"):
        assert (one / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    summary = (one / "summary.md").read_text()
    assert "| requests finished | requests | 12 |" in summary
    assert "|\n\nFigures: `figures/latency_cdf.png`, " in summary  # a blank line ends the table
    assert "B (" not in summary  # one arm: nothing to compare


def test_a_gil_sweep_gets_the_gil_page_and_the_compare_table(runs, tmp_path, capsys):
    out = report(capsys, [runs["sweep"], "-o", tmp_path / "r"])
    # in the order of the run folders' names: held first where both started in one second
    assert out["runs"] == 2 and sorted(out["arms"]) == ["held", "released"]
    page = (tmp_path / "r" / "index.html").read_text()
    assert 'id="gil"' in page and "figures/sched_cdf.png" in out["figures"]
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "## B ({1}) against A ({0})".format(*out["arms"]) in summary
    assert "no interval: 1 run(s) in an arm, 3 needed" in summary
    assert 'id="hardware"' not in page


def test_arms_of_two_devices_get_the_hardware_page_with_assumptions(runs, tmp_path, capsys):
    out = report(capsys, [runs["released"], runs["b200"], "-o", tmp_path / "r"])
    assert out["arms"] == ["H200 (modeled)", "B200 (modeled)"]
    page = (tmp_path / "r" / "index.html").read_text()
    hardware = page[page.index('id="hardware"'):page.index('id="figures"')]
    assert hardware.count("the profile's figures") == 2
    row = re.search(r"<td>step_overhead_us</td><td>50</td><td[^>]*>(.*?)</td>", hardware)
    assert row and "assumption" in row.group(1)  # shown as an assumption, not a fact
    for figure, kind in (("compute_efficiency", "fitted"), ("scaleout_gb_s", "vendor"),
                         ("network_efficiency", "fitted")):  # H200's network, B200's compute
        assert re.search(rf"<td>{figure}</td><td>[\d.]+</td><td[^>]*>{kind}</td>", hardware)
    assert "mfu model" in hardware and hardware.count('class="badge modeled">modeled') >= 2


def test_an_earlier_report_is_replaced_another_folder_refused(runs, one, tmp_path, capsys):
    import shutil

    out_dir = tmp_path / "r"
    shutil.copytree(one, out_dir)
    (out_dir / "figures" / "stale.png").write_bytes(b"old")
    report(capsys, [runs["held"], "-o", out_dir])
    assert not (out_dir / "figures" / "stale.png").exists()
    assert runs["held"].name in (out_dir / "summary.md").read_text()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    err = report(capsys, [runs["released"], "-o", other], status=2)
    assert str(other) in err and "not a report folder" in err
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "r"]  # no temporary left


@pytest.mark.parametrize("breakage, words", [
    ("nothing", "holds no run folder"),
    ("no batches", "no batches table"),
    ("bad manifest", "manifest.json"),
    ("no steps", "no step was recorded"),
])
def test_bad_input_exits_2_naming_it_and_writes_nothing(runs, tmp_path, capsys, breakage,
                                                        words):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(runs["released"], run)
    if breakage == "nothing":
        run = tmp_path / "empty"
        run.mkdir()
    elif breakage == "no batches":
        (run / "batches.parquet").unlink()
    elif breakage == "no steps":  # stopped before its first step
        import pandas as pd
        steps = run / "steps.parquet"
        pd.read_parquet(steps).iloc[:0].to_parquet(steps)
    else:
        (run / "manifest.json").write_text("{not json")
    err = report(capsys, [run, "-o", tmp_path / "r"], status=2)
    assert words in err and str(run) in err
    assert not (tmp_path / "r").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_timelines_are_bounded_for_drawing_and_cdfs_span_every_sample():
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 3600, 1_000_000))
    centres, v = binned(t, {"x": np.ones_like(t)}, reduce="sum")
    assert len(centres) == BINS and v["x"].sum() == len(t)  # no sample lost to the bins
    values = rng.lognormal(size=1_000_000)
    x, q = cdf_points(values)
    assert len(x) == 1000 and x[0] == values.min() and x[-1] == values.max()
    assert x[np.searchsorted(q, 0.5)] == pytest.approx(np.median(values), rel=1e-2)


def test_a_run_with_no_completed_request_still_reports(runs, tmp_path, capsys):
    """Stopped after some steps, before any request finished: the latency CDFs say so."""
    import shutil

    import pandas as pd

    run = tmp_path / "run"
    shutil.copytree(runs["released"], run)
    requests = pd.read_parquet(run / "requests.parquet")
    requests["status"] = "unfinished"
    requests.to_parquet(run / "requests.parquet")
    out = report(capsys, [run, "-o", tmp_path / "r"])
    assert "figures/latency_cdf.png" in out["figures"]
