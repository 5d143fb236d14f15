"""A frontier search's answer on the sweep page, as a person comparing hardware reads it
(docs/report.md, "The frontier search's answer"): the page leads with each device's fronts
drawn (no two labels overlapping), every reading of the tables at the levels as a row of the
page and of summary.md with its interval, ratio and the deployments around it, the
deployments considered per device by state, the rungs left off with why, what timed the
steps (the runs' manifests), markup shown as text, and bad tables refused naming the file.
The slow test opens a real search's page in headless chromium."""

import json
import math
import re
from html.parser import HTMLParser

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from harness.analysis.frontier import Point, envelope
from harness.analysis.report.figures import device_fronts
from harness.analysis.report.frontier_data import read_frontier
from harness.analysis.report.headline import fmt
from harness.analysis.report.sweep_data import read_sweep
from harness.commands import main
from harness.record.table_sink import write_table
from harness.schema import TABLES
from harness.sweeps.frontier.answer import readings_table
from harness.sweeps.points.table import table
from tests.browser import CHROMIUM
from tests.test_frontier_search import sweep_file
from tests.test_report_browser import ELEMENTS, FIGURES
from tests.test_report_figures import clashes, drawn_figures
from tests.test_security import FULL
from tests.test_sweep_fronts import row

pytestmark = pytest.mark.slow  # draws reports' figures

B200, H200 = "modeled:B200", "modeled:H200"
LEVELS = (25.0, 50.0, 75.0, 100.0)
STEADY_FILLING = "no steady window: still filling at the last arrival"
QUEUED = "TTFT p90 3.1 s over the SLO's 2 s: its requests queue"
# (device, deployment, concurrency, tok/s per user, output and total tok/s per device,
# why it is left off the fronts)
RUNGS = [(B200, "DEP8 vote", 8, 110, 200, 2000, ""), (B200, "DEP8 vote", 16, 90, 400, 4000, ""),
         (B200, "DEP8 vote", 32, 70, 700, 7000, ""), (B200, "DEP8 vote", 64, 40, 1000, 10000, ""),
         (B200, "DEP8 vote", 128, 20, 900, 9000, STEADY_FILLING),
         (B200, "TEP8 mixed", 1, 130, 60, 700, ""), (B200, "TEP8 mixed", 2, 120, 100, 1100, ""),
         (H200, "DEP8 vote", 8, 95, 150, 1500, ""), (H200, "DEP8 vote", 16, 75, 300, 3000, ""),
         (H200, "DEP8 vote", 32, 55, 450, 4500, ""), (H200, "TEP8 vote", 2, 105, 60, 600, ""),
         (H200, "TEP8 vote", 4, 100, 80, 800, QUEUED)]
# (device, deployment, state, reason)
DEPLOYMENTS = [(B200, "DEP8 vote", "kept", ""), (B200, "TEP8 mixed", "kept", ""),
               (B200, "DEP4 vote", "refused", "weights about 95 GB a device over its 80 GB"),
               (B200, "TEP4 mixed", "pruned", "its estimate is 0.6 of the device's best"),
               (H200, "DEP8 vote", "kept", ""), (H200, "TEP8 vote", "kept", ""),
               (H200, "DEP16 vote", "failed", "its estimate could not be stepped")]
STEP_MODEL = {"stack": "trtllm", "table": "trtllm 1.3.0rc20",
              "source": "aiconfigurator-core 0.12.0 (NVIDIA), collected data: gemm trtllm",
              "timed": ["attention", "experts"], "missing": {"dispatch": "family=dispatch"}}


def declared(name, rows):
    """`rows` in the declared columns of table `name`, the others empty."""
    empty = {"string": "", "int64": 0, "double": math.nan, "bool": False}
    return pd.DataFrame([{c.name: r.get(c.name, empty.get(str(c.type), "")) for c in
                          TABLES[name].columns} for r in rows], columns=list(TABLES[name].names))


def points_of(rungs):
    rows = [dict(device=d, deployment=dep, kind="co-located", devices=8, concurrency=c,
                 batch=c // 8 or 1, point=f"{d[-4:].lower()}-{i}", status="done",
                 steady=not why.startswith("no steady"), tokens_per_s_per_user=float(x),
                 output_tokens_per_s_per_device=float(out),
                 total_tokens_per_s_per_device=float(total), eligible=not why, left_off=why)
            for i, (d, dep, c, x, out, total, why) in enumerate(rungs)]
    points = declared("frontier_points", rows)
    for metric, column in (("output", "output_tokens_per_s_per_device"),
                           ("total", "total_tokens_per_s_per_device")):
        on = {p.label for d in dict.fromkeys(points["device"]) for p in envelope(
            Point(r.tokens_per_s_per_user, getattr(r, column), r.point, r.eligible)
            for r in points[points["device"] == d].itertuples()).points}
        points[f"front_{metric}"] = points["point"].isin(on)
    return points


def frontier_folder(tmp_path, rungs=RUNGS, deployments=DEPLOYMENTS, manifests=True):
    """A sweep folder as a frontier search leaves it: its sweep table (a row a rung), its
    three tables (the readings as the search reads its points), a run a rung."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    points = points_of(rungs)
    sweep_rows = [dict(row(r.device, 1, r.tokens_per_s_per_user,
                           r.output_tokens_per_s_per_device, 1000),
                       point=r.point, folder=f"points/{r.point}") for r in points.itertuples()]
    write_table(table(sweep_rows), folder, "sweep", "parquet")
    write_table(points, folder, "frontier_points", "parquet")
    write_table(declared("frontier_deployments", [
        dict(device=d, deployment=dep, kind="co-located", devices=8, state=s, reason=why)
        for d, dep, s, why in deployments]), folder, "frontier_deployments", "parquet")
    write_table(readings_table(points, LEVELS, B200), folder, "frontier_readings", "parquet")
    for point in points["point"] if manifests else ():
        run = folder / "points" / point / "base" / "run"
        run.mkdir(parents=True)
        (run / "manifest.json").write_text(json.dumps(dict(
            device={"name": "x86_64"}, gil_mode="released", modeled=True,
            step_model=STEP_MODEL)))
    return folder


class Rows(HTMLParser):
    """Each table row of the page: its attributes and its cells' text."""

    def __init__(self, html):
        super().__init__()
        self.rows, self.cell = [], None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append((dict(attrs), []))
        elif tag == "td" and self.rows:
            self.cell = ""

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data

    def handle_endtag(self, tag):
        if tag == "td" and self.rows and self.cell is not None:
            self.rows[-1][1].append(self.cell)
            self.cell = None

    def of(self, cls):
        return [(a, cells) for a, cells in self.rows if cls in a.get("class", "").split()]


def same(shown, value):
    """A number as the page's data-* attribute holds it (a browser's NaN: None) is `value`."""
    shown = math.nan if shown is None else float(shown)
    return (math.isnan(shown) and math.isnan(value)) or shown == value


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("frontier")
    folder = frontier_folder(tmp)
    assert main(["report", str(folder), "-o", str(tmp / "page")]) == 0
    readings = pd.read_parquet(folder / "frontier_readings.parquet")
    return dict(folder=folder, readings=readings, html=(tmp / "page" / "index.html").read_text(),
                summary=(tmp / "page" / "summary.md").read_text(),
                figures=sorted(p.name for p in (tmp / "page" / "figures").iterdir()))


def test_every_reading_is_a_row_of_the_page(page):
    shown = {(a["data-metric"], float(a["data-level"]), a["data-device"]): (a, cells)
             for a, cells in Rows(page["html"]).of("frontier-reading")}
    readings = page["readings"]
    assert set(readings["metric"]) >= {"output", "total"}
    drawn = readings[readings["metric"].isin(["output", "total"])]
    assert len(shown) == len(drawn) == 2 * len(LEVELS) * 2
    for r in drawn.itertuples():
        attrs, cells = shown[r.metric, r.level, r.device]
        assert same(attrs["data-value"], r.value) and same(attrs["data-ratio"], r.ratio)
        if math.isfinite(r.value):
            assert cells[2] == f"{fmt(r.value)} [{fmt(r.low)}, {fmt(r.high)}]"
            assert (attrs["data-left"], attrs["data-right"]) == (r.left, r.right)
            assert cells[3] == ("1 (reference)" if r.device == B200 else
                                f"{r.ratio:.2f}x [{r.ratio_low:.2f}, {r.ratio_high:.2f}]")
        else:
            assert cells[2] == "–" and cells[6] == r.reason
    # H200 at 100 tok/s per user: between its DEP8 @ 8 (95) and TEP8 @ 2 (105); B200's
    # between DEP8 @ 16 (90) and DEP8 @ 8 (110)
    h200 = readings[(readings["metric"] == "output") & (readings["level"] == 100)
                    & (readings["device"] == H200)].iloc[0]
    assert (h200["left"], h200["right"], h200["value"]) == ("DEP8 vote @ 8", "TEP8 vote @ 2",
                                                           105.0)
    assert h200["ratio"] == pytest.approx(105 / 300)


def test_the_page_leads_with_the_fronts(page):
    html = page["html"]
    assert html.index('id="frontier"') < html.index('id="output_tokens_per_device"')
    assert page["figures"][:2] == ["device_fronts_output.png", "device_fronts_total.png"]
    for name in ("device_fronts_output", "device_fronts_total"):
        assert f'id="fig-{name}"' in html
    assert "Modeled: every figure is over each run's steady window" in html
    assert (f"{B200} modeled by trtllm 1.3.0rc20 kernel tables (aiconfigurator-core 0.12.0 "
            f"(NVIDIA)), dispatch by the link model") in html


def test_the_deployments_considered_and_the_rungs_left_off(page):
    counts = {a["data-device"]: {k[5:]: v for k, v in a.items() if k.startswith("data-")}
              for a, _ in Rows(page["html"]).of("frontier-deployments-row")}
    assert counts[B200] == dict(device=B200, considered="4", kept="2", pruned="1",
                                refused="1", failed="0")
    assert counts[H200] == dict(device=H200, considered="3", kept="2", pruned="0",
                                refused="0", failed="1")
    off = [(a["data-device"], a["data-deployment"], a["data-concurrency"], cells[-1])
           for a, cells in Rows(page["html"]).of("left-off-row")]
    assert off == [(B200, "DEP8 vote", "128", STEADY_FILLING), (H200, "TEP8 vote", "4", QUEUED)]


def test_summary_md_holds_the_readings(page):
    summary = page["summary"]
    assert summary.index("### Which hardware") < summary.index("### Best output tok/s")
    readings = page["readings"]
    for r in readings[readings["metric"].isin(["output", "total"])].itertuples():
        value = (f"{fmt(r.value)} \\[{fmt(r.low)}, {fmt(r.high)}\\]"
                 if math.isfinite(r.value) else "–")
        assert f"| {r.level:g} | {r.device} | {value} |" in summary, r
    assert f"| {B200} | 4 | 2 | 1 | 1 | 0 |" in summary
    assert f"| {H200} | TEP8 vote | co-located | 4 | done | {QUEUED} |" in summary


def test_a_sweep_without_frontier_tables_has_no_such_section(tmp_path):
    folder = frontier_folder(tmp_path)
    for name in ("frontier_points", "frontier_deployments", "frontier_readings"):
        (folder / f"{name}.parquet").unlink()
    assert main(["report", str(folder), "-o", str(tmp_path / "page")]) == 0
    assert 'id="frontier"' not in (tmp_path / "page" / "index.html").read_text()
    assert not list((tmp_path / "page" / "figures").glob("device_fronts_*"))


def test_no_two_labels_of_a_crowded_front_overlap(tmp_path):
    """Two devices' fronts of 14 points each, close together: every label placed clear of
    the others and of the axes' edge, the rest named in the caption."""
    rungs = [(d, f"DEP{8 * (i % 3 + 1)} {'vote' if i % 2 else 'mixed'}", 2 ** i,
              20 + 6 * i + k, 1000 - 60 * i - 20 * k, 5000 - 300 * i, "")
             for k, d in enumerate((B200, H200)) for i in range(14)]
    folder = frontier_folder(tmp_path, rungs, manifests=False)
    frontier = read_frontier(folder, read_sweep(folder).rows)
    with drawn_figures() as figures:
        drawn = [device_fronts.draw(frontier, m, "") for m in ("output", "total")]
    found = [c for name, fig in figures.items() for c in clashes(name, fig)]
    labels = {name: [t.get_text() for t in fig.axes[0].texts] for name, fig in figures.items()}
    plt.close("all")
    assert not found
    for d in drawn:  # each front point labelled or named as unlabelled
        front = frontier.points[frontier.points[f"front_{d.name.rsplit('_', 1)[1]}"]]
        for r in front.itertuples():
            text = f"{r.deployment} @ {r.concurrency}"
            assert any(text in t for t in labels[d.name]) or text in d.caption, text
    assert not frontier.modeled  # no run's manifest: not said to be modeled


def test_markup_in_the_tables_is_text(tmp_path):
    hostile = f"modeled:{FULL}"
    rungs = [(hostile if d == H200 else d, dep, *rest) for d, dep, *rest in RUNGS]
    rungs[-1] = (*rungs[-1][:-1], FULL)
    deployments = [(d, FULL if state == "failed" else dep, state, why)
                   for d, dep, state, why in DEPLOYMENTS]
    folder = frontier_folder(tmp_path, rungs, deployments)
    assert main(["report", str(folder), "-o", str(tmp_path / "page")]) == 0
    html = (tmp_path / "page" / "index.html").read_text()
    summary = (tmp_path / "page" / "summary.md").read_text()
    assert "<script>" not in html and "<img src=x" not in html
    off = [(a["data-device"], cells[-1]) for a, cells in Rows(html).of("left-off-row")]
    assert (hostile, FULL) in off  # shown as the text it is
    frontier = summary.partition("### Which hardware")[2].partition("### Best")[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in frontier
    assert "<script>" not in summary and "<img" not in summary
    assert not any(line.startswith("| a | b |") for line in summary.splitlines())


@pytest.mark.parametrize("broken, message", [
    ("missing", r"frontier_readings\.parquet: no such file"),
    ("column", r"frontier_points\.parquet: no column\(s\) front_output: not a "
               r"frontier_points table"),
    ("kind", r"frontier_readings\.parquet: column value, row 1: expected a number"),
    ("folder", r"sweep\.parquet: point b200-0: folder '\.\./\.\./etc': expected a point's "
               r"folder relative to the sweep's"),
])
def test_a_broken_frontier_table_is_refused_naming_it(tmp_path, capsys, broken, message):
    folder = frontier_folder(tmp_path, manifests=False)
    if broken == "missing":
        (folder / "frontier_readings.parquet").unlink()
    elif broken == "column":
        points = pd.read_parquet(folder / "frontier_points.parquet")
        points.drop(columns="front_output").to_parquet(folder / "frontier_points.parquet")
    elif broken == "folder":
        sweep = pd.read_parquet(folder / "sweep.parquet")
        sweep.loc[0, "folder"] = "../../etc"
        sweep.to_parquet(folder / "sweep.parquet")
    else:
        readings = pd.read_parquet(folder / "frontier_readings.parquet")
        readings["value"] = "many"
        readings.to_parquet(folder / "frontier_readings.parquet")
    assert main(["report", str(folder), "-o", str(tmp_path / "page")]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "page").exists()


READINGS = """Array.from(document.querySelectorAll('tr.frontier-reading')).map(tr => [
  tr.dataset.metric, Number(tr.dataset.level), tr.dataset.device, Number(tr.dataset.value),
  Number(tr.dataset.ratio), tr.dataset.left, tr.dataset.right])"""


@pytest.mark.slow  # a whole search, then a browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_a_real_searchs_page_opens_in_chromium(tmp_path):
    from tests.browser import Page

    path = sweep_file(tmp_path, {"mtp": [0], "most": 8, "keep": 2, "disaggregated": False,
                                 "levels": [55, 60, 65, 70, 75]}, {"device": [H200, B200]})
    assert main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}",
                 "--workers", "2"]) == 0
    folder, out = tmp_path / "out" / "fr", tmp_path / "page"
    assert main(["report", str(folder), "-o", str(out)]) == 0
    index = out / "index.html"
    page = Page(index.resolve().as_uri())
    try:
        figures, readings, elements, text = (page.evaluate(s) for s in (
            FIGURES, READINGS, ELEMENTS, "document.body.innerText"))
        errors, requests, dialogs = page.errors(), page.requests(), page.dialogs()
    finally:
        page.close()
    assert errors == [] and dialogs == [] and elements["scripts"] == 0
    assert [u for u in requests if u != index.resolve().as_uri()
            and not u.startswith("data:")] == []
    assert [f["alt"] for f in figures][:2] == [
        "Each device's front: output tok/s per device against tok/s per user",
        "Each device's front: total tok/s per device (prompt and output) against tok/s per "
        "user"]
    assert all(f["complete"] and f["natural"] > 0 and f["width"] > 0 for f in figures)
    shown = {(m, level, d): (v, r, left, right) for m, level, d, v, r, left, right in readings}
    table = pd.read_parquet(folder / "frontier_readings.parquet")
    assert {"output", "total"} <= set(table["metric"])
    table = table[table["metric"].isin(["output", "total"])
                  | table.groupby("metric")["value"].transform(lambda v: v.notna().any())]
    assert len(shown) == len(table) and len(table) >= 2 * 5 * 2
    for r in table.itertuples():
        v, ratio, left, right = shown[r.metric, r.level, r.device]
        assert same(v, r.value) and same(ratio, r.ratio)
        if math.isfinite(r.value):
            assert (left, right) == (r.left, r.right)
    assert {d for d, v in zip(table["device"], table["value"]) if math.isfinite(v)} \
        == {H200, B200}  # each device read at some level
    assert "Modeled: every figure is over each run's steady window" in text
    assert f"{H200} modeled by trtllm" in text and "kernel tables" in text
