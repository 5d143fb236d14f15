"""The trend page in a real browser: headless chromium opens it over file:// with no console
error and no request beyond the file, every series' figure renders, the change points'
rows name the commits either side, and a store whose strings hold markup adds no element
and runs nothing."""

import re

import numpy as np
import pytest

from harness.commands import main
from tests.browser import CHROMIUM
from tests.helpers import synthetic_run
from tests.test_history import date, history, needs_otava, stepped
from tests.test_report_browser import ELEMENTS, FIGURES
from tests.test_report_trend import TEMPLATE
from tests.test_security import FULL

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(.ci/run installs Debian's chromium)"), pytest.mark.slow]

CHANGES = """Array.from(document.querySelectorAll('tr.change')).map(
  tr => [tr.dataset.before, tr.dataset.after, tr.classList.contains('regression')])"""


def opened(out):
    from tests.browser import Page

    page = Page((out / "index.html").resolve().as_uri())
    try:
        seen = dict(figures=page.evaluate(FIGURES), changes=page.evaluate(CHANGES),
                    elements=page.evaluate(ELEMENTS), text=page.evaluate(
                        "document.body.innerText"))
        seen.update(errors=page.errors(), requests=page.requests(), dialogs=page.dialogs())
    finally:
        page.close()
    own = (out / "index.html").resolve().as_uri()
    assert seen["errors"] == [] and seen["dialogs"] == []
    assert [u for u in seen["requests"] if u != own and not u.startswith("data:")] == []
    for f in seen["figures"]:
        assert f["complete"] and f["natural"] > 0 and f["width"] > 0 and f["height"] > 0, f
    return seen


@needs_otava
def test_the_trend_page_renders_its_figures_and_change_points(tmp_path):
    store = history(tmp_path, stepped(np.random.default_rng(7)))
    out = tmp_path / "page"
    assert main(["report", "--history", str(store), "-o", str(out)]) == 0
    seen = opened(out)
    assert len(seen["figures"]) == 2
    assert {f["alt"].split(":")[0] for f in seen["figures"]} == {"ttft.p99",
                                                                  "throughput.output_tokens"}
    before, after = "05" + "c" * 38, "06" + "c" * 38
    assert seen["changes"] == [[before, after, True]] * 4
    assert "05cccccccccc" in seen["text"] and "+10." in seen["text"]


def test_a_store_of_markup_adds_no_element_and_runs_nothing(tmp_path):
    store = tmp_path / "store"
    for i in range(3):
        run = synthetic_run(tmp_path / f"r{i}", {"ttft.p99": (0.5 + i, "s")},
                            values={"name": f"workload{FULL}"})
        assert main(["history", "add", str(run), "--store", str(store), "--commit",
                     f"c{i}<img/src=x/onerror=alert({i})>", "--date", date(i)]) == 0
    out = tmp_path / "page"
    assert main(["report", "--history", str(store), "-o", str(out)]) == 0
    seen = opened(out)
    written = set(re.findall(r"<([a-z][a-z0-9]*)", TEMPLATE.read_text()))
    assert set(seen["elements"]["tags"]) <= written | {"html", "head", "body"}, \
        set(seen["elements"]["tags"]) - written
    assert seen["elements"]["handlers"] == [] and seen["elements"]["images"] == []
    assert seen["elements"]["scripts"] == 0 and seen["elements"]["figures"] == 1
    assert "<script>alert(1)</script>" in seen["text"]  # shown as text
