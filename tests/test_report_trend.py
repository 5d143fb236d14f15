"""The trend page, `steptrace report --history STORE -o DIR` (docs/report.md, "The trend
page"): each headline metric per configuration over commits, runs as points and medians as
a line, the change points marked with the commits either side; every string from the store
shown as text; written under the report's destination rules."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.analysis.report import trend
from harness.commands import main
from tests.helpers import synthetic_run
from tests.test_history import bench_json, commit, date, history, needs_otava, stepped
from tests.test_security import COMPONENT, FULL

TEMPLATE = Path(harness.__file__).parent / "analysis" / "report" / "templates" / "trend.html.j2"


def report(store, out, *extra):
    return main(["report", "--history", str(store), "-o", str(out), *extra])


def changes(html):
    """(before, after, regression) of each change point's row on the page."""
    return [(b, a, "regression" in c) for c, b, a in re.findall(
        r'<tr class="(change[^"]*)" data-before="([^"]*)" data-after="([^"]*)">', html)]


@pytest.fixture(scope="module")
def stepped_store(tmp_path_factory):
    return history(tmp_path_factory.mktemp("trend"), stepped(np.random.default_rng(7)))


@needs_otava
def test_each_series_is_drawn_with_its_change_point_between_its_commits(stepped_store,
                                                                        tmp_path, capsys):
    out = tmp_path / "page"
    assert report(stepped_store, out, "--json") == 0
    said = json.loads(capsys.readouterr().out)
    assert said["figures"] == ["figures/trend_00.png", "figures/trend_01.png"]
    assert said["runs"] == 12
    html = (out / "index.html").read_text()
    assert html.count("<figure") == 2 and html.count("data:image/png;base64,") == 2
    # the summary's table and each figure's own: two series, a regression each
    assert changes(html) == [(commit(5), commit(6), True)] * 4
    assert html.index("throughput.output_tokens") < html.index("ttft.p99")  # HEADLINE's order
    summary = (out / "summary.md").read_text()
    assert summary.count("**regression**") == 2 and "`06cccccccccc`" in summary
    marker = json.loads((out / "report.json").read_text())
    assert marker["kind"] == "steptrace report" and "--history" in marker["command"]
    assert sorted(marker["files"]) == ["figures/trend_00.png", "figures/trend_01.png",
                                       "index.html", "summary.md"]
    assert report(stepped_store, out) == 0  # a trend page it made is replaced


def test_without_otava_the_series_are_drawn_and_the_page_says_what_is_missing(
        stepped_store, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "otava.analysis", None)
    out = tmp_path / "page"
    assert report(stepped_store, out) == 0
    html = (out / "index.html").read_text()
    assert html.count("<figure") == 2 and changes(html) == []
    assert "Change points need Apache Otava" in html
    assert "pip install --no-deps apache-otava==0.8.0" in html
    assert "Change points need Apache Otava" in (out / "summary.md").read_text()


def test_the_page_draws_at_most_max_figures_and_says_how_many_it_left_out(
        stepped_store, tmp_path, monkeypatch):
    monkeypatch.setattr(trend, "MAX_FIGURES", 1)
    out = tmp_path / "page"
    assert report(stepped_store, out) == 0
    html = (out / "index.html").read_text()
    assert html.count("<figure") == 1 and "1 more series are not drawn" in html
    assert len(list((out / "figures").iterdir())) == 1


def test_only_headline_metrics_and_benchmarks_are_drawn(tmp_path):
    store = tmp_path / "store"
    for i in range(3):
        run = synthetic_run(tmp_path / f"r{i}", {"ttft.p99": (0.5, "s"), "ttft.p90": (0.4, "s"),
                                                 "step.mean": (0.01, "s")})
        bench = bench_json(tmp_path / f"b{i}.json", {"test_round[cpp-64]": 5e-6}, at=i)
        assert main(["history", "add", str(run), "--store", str(store), "--commit", commit(i),
                     "--date", date(i)]) == 0
        assert main(["history", "add", "--bench", str(bench), "--store", str(store)]) == 0
    out = tmp_path / "page"
    assert report(store, out) == 0
    titles = re.findall(r'<img alt="([^:"]*):', (out / "index.html").read_text())
    assert titles == ["test_round[cpp-64].median", "ttft.p99"]


def test_a_store_without_a_headline_metric_says_so(tmp_path):
    run = synthetic_run(tmp_path / "r0", {"ttft.p90": (0.4, "s")})
    store = tmp_path / "store"
    assert main(["history", "add", str(run), "--store", str(store), "--commit", commit(0),
                 "--date", date(0)]) == 0
    assert report(store, tmp_path / "page") == 0
    html = (tmp_path / "page" / "index.html").read_text()
    assert "<figure" not in html and "holds no headline metric" in html
    assert "1 run at 1 commit;" in html


def test_every_string_from_the_store_is_text(tmp_path):
    store = tmp_path / "store"
    for i in range(3):
        run = synthetic_run(tmp_path / f"r{i}", {"ttft.p99": (0.5 + i, "s")},
                            values={"name": f"workload{FULL}"})
        bench = bench_json(tmp_path / f"b{i}.json", {f"bench{COMPONENT}": 1e-3}, at=i)
        assert main(["history", "add", str(run), "--bench", str(bench), "--store", str(store),
                     "--commit", f"c{i}<img/src=x/onerror=alert({i})>",  # one word
                     "--date", date(i)]) == 0
    out = tmp_path / "page"
    assert report(store, out) == 0
    html = (out / "index.html").read_text()
    written = set(re.findall(r"<([a-z][a-z0-9]*)", TEMPLATE.read_text()))
    written |= set(re.findall(r"<([a-z][a-z0-9]*)", (TEMPLATE.parent / "style.css.j2").read_text()))
    assert set(re.findall(r"<([a-z][a-z0-9]*)", html)) <= written | {"html"}
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    summary = (out / "summary.md").read_text()
    assert "<img" not in summary and "<script" not in summary


def test_what_report_history_refuses(stepped_store, tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "thesis.tex").write_text("x")
    assert report(stepped_store, tmp_path / "notes") == 2
    assert "is not a report" in capsys.readouterr().err
    assert report(stepped_store, stepped_store / "page") == 2
    assert "lies inside the history store" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--history", str(stepped_store), "-o",
                 str(tmp_path / "x")]) == 2
    assert report(tmp_path / "nowhere", tmp_path / "y") == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    assert (tmp_path / "notes" / "thesis.tex").read_text() == "x"
