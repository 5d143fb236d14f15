"""A sweep as a user reads it: `steptrace report SWEEP_DIR` draws its fronts page, opened in
headless chromium (figures render, the best configurations and ratios in its table, the
refused and failed points with their reasons, nothing run or fetched from a table of
markup); the points' modeled power and cost columns as their runs and profiles give them;
`report` and `compare` read a sweep's points as runs, at capacity in capacity mode. Slow
tier: each test starts processes or a browser."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import harness.analysis.report as report_package
from engine.devices.profile import load_device_profile
from harness.analysis.runs import find_runs
from harness.commands import main
from harness.record.run import Run
from harness.record.table_sink import write_table
from harness.sweeps.points.execute import execute, plan
from harness.sweeps.points.table import table
from tests.browser import CHROMIUM
from tests.test_report_browser import ELEMENTS, FIGURES
from tests.test_security import COMPONENT, FULL
from tests.test_sweep_fronts import POINTS, row
from tests.test_sweep_points import TINY, sweep_file
from tests.test_sweep_run import InProcess

pytestmark = pytest.mark.slow
TEMPLATE = Path(report_package.__file__).parent / "templates" / "sweep.html.j2"
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

GRID = """base: base.yaml
axes:
  device: [modeled:B200, modeled:H200]
  engine.max_num_seqs: [2, 16]
  engine.num_kv_blocks: [256, 0]
prices: {"modeled:B200": 5.5}
"""
BEST = """Array.from(document.querySelectorAll('tr.best-row')).map(tr => [
  tr.closest('section').id, tr.dataset.level, tr.dataset.group, tr.dataset.point,
  Number(tr.dataset.value), Number(tr.dataset.ratio)])"""
NOT_DONE = """Array.from(document.querySelectorAll('tr.not-done-row')).map(
  tr => [tr.dataset.status, tr.cells[4].innerText])"""


def steptrace(*args):
    return subprocess.run([sys.executable, "-m", "harness.commands", *args],
                          capture_output=True, text=True, timeout=300)


def opened(index):
    from tests.browser import Page

    page = Page(index.resolve().as_uri())
    try:
        seen = {name: page.evaluate(script) for name, script in (
            ("figures", FIGURES), ("best", BEST), ("not_done", NOT_DONE),
            ("elements", ELEMENTS), ("text", "document.body.innerText"))}
        seen.update(errors=page.errors(), requests=page.requests(), dialogs=page.dialogs())
    finally:
        page.close()
    assert seen["errors"] == [] and seen["dialogs"] == []
    assert [u for u in seen["requests"] if u != index.resolve().as_uri()
            and not u.startswith("data:")] == []
    for f in seen["figures"]:
        assert f["complete"] and f["natural"] > 0 and f["width"] > 0 and f["height"] > 0, f
    return seen


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A real sweep of 8 points, 4 refused, run by the command, with its --json."""
    tmp = tmp_path_factory.mktemp("sweep")
    out = tmp / "out"
    done = steptrace("sweep", str(sweep_file(tmp, GRID)), "--set", f"output={out}",
                     "--workers", "2", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_modeled_power_and_cost_follow_the_run_and_its_profile(swept):
    done = [r for r in swept["rows"] if r["status"] == "done"]
    assert len(done) == 4
    for r in done:
        run = Run.read(r["run_dir"])
        profile = load_device_profile(r["device"].partition(":")[2])
        steps = run.table("steps").drop_duplicates(["instance", "step"])
        steps = steps[~steps["warmup"]]
        busy = (steps["t_end_s"] - steps["t_start_s"]).sum() / (
            steps["t_end_s"].max() - steps["t_start_s"].min())
        assert r["power_source"] == "modeled" and r["busy"] == pytest.approx(busy)
        idle, tdp = profile.idle_w.value, profile.tdp_w.value
        assert r["power_w"] == pytest.approx(idle + (tdp - idle) * busy)
        assert r["output_tokens_per_kw"] == pytest.approx(
            r["output_tokens_per_device"] * 1000 / r["power_w"])
        priced = r["device"] == "modeled:B200"
        assert (r["price_per_hour"] == 5.5) if priced else r["price_per_hour"] is None
        assert (r["output_tokens_per_dollar_hour"] == pytest.approx(
            r["output_tokens_per_device"] / 5.5)) if priced else \
            r["output_tokens_per_dollar_hour"] is None


@needs_chromium
def test_the_sweep_page_draws_the_fronts_and_the_best_per_level(swept, tmp_path):
    page = tmp_path / "page"
    done = steptrace("report", swept["folder"], "-o", str(page), "--interactivity", "1,1e9",
                     "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["done"] == 4 and result["groups"] == ["modeled:B200", "modeled:H200"]
    assert result["figures"] == ["figures/fronts_per_device.png",
                                 "figures/fronts_per_dollar_hour.png",
                                 "figures/fronts_per_kw.png"]
    seen = opened(page / "index.html")
    assert len(seen["figures"]) == 3
    rows = {(s, level, g): (p, v, r) for s, level, g, p, v, r in seen["best"]}
    best = {}
    for device in ("modeled:B200", "modeled:H200"):
        mine = [r for r in swept["rows"] if r["device"] == device and r["status"] == "done"]
        best[device] = max(mine, key=lambda r: r["output_tokens_per_device"])
        point, value, _ = rows["output_tokens_per_device", "1", device]
        assert (point, value) == (best[device]["point"],
                                  best[device]["output_tokens_per_device"])
        assert rows["output_tokens_per_device", "1e+09", device][0] == "-"  # none that fast
    assert rows["output_tokens_per_device", "1", "modeled:H200"][2] == pytest.approx(
        best["modeled:H200"]["output_tokens_per_device"]
        / best["modeled:B200"]["output_tokens_per_device"])
    assert len([s for s in seen["not_done"] if s[0] == "refused"]) == 4
    assert all("num_kv_blocks" in reason for _, reason in seen["not_done"])
    again = steptrace("report", swept["folder"], "-o", str(page))  # its own report: replaced
    assert again.returncode == 0, again.stderr
    assert "fronts of modeled:B200, modeled:H200; 3 figures" in again.stdout


def test_report_and_compare_read_a_sweeps_points_as_runs(swept, tmp_path):
    folder = swept["folder"]
    runs = sorted(r["run_dir"] for r in swept["rows"] if r["status"] == "done")
    assert sorted(map(str, find_runs([folder]))) == runs
    assert sorted(map(str, find_runs([f"{folder}/points"]))) == runs
    compared = steptrace("compare", "--by", "device", folder, "--json")
    assert compared.returncode == 0, compared.stderr
    result = json.loads(compared.stdout)
    assert len(result["runs_a"]) == len(result["runs_b"]) == 2
    reported = steptrace("report", f"{folder}/points", "-o", str(tmp_path / "runs"), "--json")
    assert reported.returncode == 0, reported.stderr
    assert json.loads(reported.stdout)["runs"] == 4


def test_a_capacity_sweeps_points_are_read_at_capacity(tmp_path):
    path = sweep_file(tmp_path, "base: base.yaml\nmode: capacity\naxes: {device: "
                                "[modeled:B200, modeled:H200]}\n", TINY + "slo: {ttft: 0.002}\n")
    the_plan = plan(path, (f"output={tmp_path / 'out'}",))
    rows = execute(the_plan, InProcess())
    write_table(table(rows), the_plan.folder, "sweep", "parquet")
    assert [str(p) for p in find_runs([the_plan.folder])] == [r["run_dir"] for r in rows]
    probes = find_runs([the_plan.folder / "points"])  # a folder of runs: every probe
    assert len(probes) > len(rows) and {r["run_dir"] for r in rows} <= set(map(str, probes))


@needs_chromium
def test_a_sweep_table_of_markup_adds_no_element_and_runs_nothing(tmp_path):
    hostile = f"modeled:{COMPONENT}"
    rows = [row(hostile if d == "modeled:H200" else d, *rest) for d, *rest in POINTS]
    rows.append(row(hostile, 99, 1, 1, 1, status="failed", reason=FULL))
    folder = tmp_path / "sweep"
    folder.mkdir()
    write_table(table(rows, {hostile: 2.0}), folder, "sweep", "parquet")
    out = tmp_path / "page"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    seen = opened(out / "index.html")
    assert "<script>alert(1)</script>" not in (out / "index.html").read_text()
    written = set(re.findall(r"<([a-z][a-z0-9]*)", TEMPLATE.read_text()))
    assert set(seen["elements"]["tags"]) <= written | {"html", "head", "body"}
    assert seen["elements"]["handlers"] == [] and seen["elements"]["images"] == []
    assert seen["elements"]["scripts"] == 0 and seen["elements"]["figures"] == 3
    assert "<script>alert(1)</script>" in seen["text"] and hostile in seen["text"]
    assert [s for s, r in seen["not_done"] if "<script>alert(1)</script>" in r] == ["failed"]


def test_a_pd_points_power_is_each_pools_on_its_own_device(tmp_path):
    """Prefill on an H800, decode on two H200 instances: each pool at its profile's idle
    floor and TDP and its own busy share, per device of the three."""
    base = TINY.replace("device: modeled:B200", "device: modeled:H800") + (
        "deployment:\n  prefill: {instances: 1}\n  decode: {instances: 2, device: "
        "modeled:H200}\n  kv_transfer: {link: 1}\n")
    path = sweep_file(tmp_path, "base: base.yaml\naxes: {engine.max_num_seqs: [8]}\n", base)
    (result,) = execute(plan(path, (f"output={tmp_path / 'out'}",)), InProcess())
    assert result["status"] == "done", result["reason"]
    run = Run.read(result["run_dir"])
    steps = run.table("steps").drop_duplicates(["role", "instance", "step"])
    steps = steps[~steps["warmup"]]
    window = steps["t_end_s"].max() - steps["t_start_s"].min()
    busy = {role: ((part["t_end_s"] - part["t_start_s"]).groupby(part["instance"]).sum()
                   / window).mean() for role, part in steps.groupby("role", observed=True)}
    watts = 0.0
    for role, name, count in (("prefill", "H800", 1), ("decode", "H200", 2)):
        p = load_device_profile(name)
        watts += count * (p.idle_w.value + (p.tdp_w.value - p.idle_w.value) * busy[role])
    assert result["power_source"] == "modeled"
    assert result["power_w"] == pytest.approx(watts / 3)
    assert result["busy"] == pytest.approx((busy["prefill"] + 2 * busy["decode"]) / 3)
