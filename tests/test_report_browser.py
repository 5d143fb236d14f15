"""The report in a real browser: headless chromium opens index.html over file:// with no
console error and no request beyond the file itself, and every figure renders with a
non-zero size; a screenshot is saved beside the report."""

import pytest

from harness.commands import main
from tests.browser import CHROMIUM
from tests.helpers import modeled_runs

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(.ci/run installs Debian's chromium)")

FIGURES = """Array.from(document.querySelectorAll('figure img')).map(img => {
  const box = img.getBoundingClientRect();
  return {alt: img.alt, complete: img.complete, natural: img.naturalWidth * img.naturalHeight,
          width: box.width, height: box.height};
})"""


def test_the_report_opens_offline_and_every_figure_renders(tmp_path):
    from tests.browser import Page

    runs = modeled_runs(tmp_path / "runs", "gil=both")
    out = tmp_path / "report"
    assert main(["report", str(runs[0].parent), "-o", str(out)]) == 0
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
