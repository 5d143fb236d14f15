"""The report in a real browser: headless chromium opens index.html over file:// with no
console error and no request beyond the file itself, and every figure renders with a
non-zero size; a screenshot is saved beside the report. The report of hostile runs (every
string with markup, tests/test_security.py) holds no element the template did not
write, and runs nothing."""

import pytest

from harness.commands import main
from tests.browser import CHROMIUM
from tests.helpers import modeled_runs, pd_runs
from tests.test_security import TEMPLATE, hostile_runs

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(.ci/run installs Debian's chromium)"), pytest.mark.slow]

FIGURES = """Array.from(document.querySelectorAll('figure img')).map(img => {
  const box = img.getBoundingClientRect();
  return {alt: img.alt, complete: img.complete, natural: img.naturalWidth * img.naturalHeight,
          width: box.width, height: box.height};
})"""


@pytest.mark.parametrize("kind", ["gil", "pd", "sessions"])
def test_the_report_opens_offline_and_every_figure_renders(tmp_path, kind):
    """Two arms of GIL modes; a P/D run against a co-located one (its pools and transfers,
    the deployment page); a session trace's run (its sessions' figures)."""
    from tests.browser import Page
    from tests.test_sessions_workload import run, workload

    if kind == "gil":
        paths = [modeled_runs(tmp_path / "runs", "gil=both")[0].parent]
    elif kind == "sessions":
        paths = [run(workload(tmp_path))]
    else:
        paths = modeled_runs(tmp_path / "colocated") + pd_runs(tmp_path / "pd")
    out = tmp_path / "report"
    assert main(["report", *map(str, paths), "-o", str(out)]) == 0
    page = Page((out / "index.html").resolve().as_uri())
    try:
        figures = page.evaluate(FIGURES)
        title = page.evaluate("document.title")
        page.screenshot(out / "screenshot.png")
        errors, requests = page.errors(), page.requests()
    finally:
        page.close()
    assert title.startswith("steptrace report")
    assert errors == []
    own = (out / "index.html").resolve().as_uri()
    assert [u for u in requests if u != own and not u.startswith("data:")] == []
    pngs = list((out / "figures").glob("*.png"))
    assert len(figures) == len(pngs) >= 9
    for f in figures:
        assert f["complete"] and f["natural"] > 0 and f["width"] > 0 and f["height"] > 0, f
    assert (out / "screenshot.png").stat().st_size > 10_000
    alts = {f["alt"] for f in figures}
    if kind == "sessions":
        assert {"Sessions: the longest, turn by turn", "Sessions: prefix hit rate by turn"} \
            <= alts
    if kind == "pd":
        assert {"P/D pools: each instance's load and the requests routed to it",
                "P/D: KV transfers and the wait for decode room"} <= alts


ELEMENTS = """(() => {
  const all = Array.from(document.querySelectorAll('*'));
  const handlers = all.flatMap(e => e.getAttributeNames().filter(a => a.startsWith('on'))
                                    .map(a => e.tagName + ' ' + a));
  const images = Array.from(document.images).filter(
    img => !img.closest('figure') || !img.src.startsWith('data:image/png;base64,')).map(img => img.src);
  return {tags: Array.from(new Set(all.map(e => e.tagName.toLowerCase()))), handlers, images,
          scripts: document.scripts.length, figures: document.querySelectorAll('figure img').length};
})()"""


def test_the_report_of_hostile_runs_runs_nothing_and_fetches_nothing(tmp_path):
    import re

    from tests.browser import Page

    runs = hostile_runs(tmp_path / "runs")
    out = tmp_path / "report"
    assert main(["report", str(runs["one"]), "-o", str(out)]) == 0
    page = Page((out / "index.html").resolve().as_uri())
    try:
        elements = page.evaluate(ELEMENTS)
        errors, requests, dialogs = page.errors(), page.requests(), page.dialogs()
    finally:
        page.close()
    assert errors == [] and dialogs == []
    own = (out / "index.html").resolve().as_uri()
    assert [u for u in requests if u != own and not u.startswith("data:")] == []
    written = set(re.findall(r"<([a-z][a-z0-9]*)", TEMPLATE.read_text()))
    assert set(elements["tags"]) <= written, set(elements["tags"]) - written
    assert elements["handlers"] == [] and elements["images"] == []
    assert elements["scripts"] == 0  # the template has none
    assert elements["figures"] == len(list((out / "figures").glob("*.png")))
