"""The report of a GIL sweep ends with the protocol's verdict (docs/report.md, "The GIL
page"): each arm against the released arm, in the workload's order of arms, on docs/gil.md's
primary metrics, as `steptrace gil` prints it; never a ratio to whichever arm came first."""

import re

import pytest

from harness.analysis.report.headline import fmt
from harness.commands import main
from harness.commands.gil import _verdict
from harness.record.run import Run
from tests.helpers import MODELED

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("gil")
    (root / "w.yaml").write_text(MODELED + f"output: {root / 'results'}\nname: small\n"
                                 "repeats: 2\ngil_aa: true\n")
    assert main(["gil", str(root / "w.yaml")]) == 0
    folder = root / "results" / "small"
    runs = sorted(p.parent for p in folder.rglob("manifest.json"))
    assert main(["report", str(folder), "-o", str(root / "r")]) == 0
    return runs, root / "r"


def test_a_gil_sweeps_report_ends_with_each_arm_against_released(sweep):
    runs, report = sweep
    expected = _verdict([Run.read(r) for r in runs])
    assert [c.arm_b for c in expected] == ["gil_mode=held", "gil_mode=released_aa"]
    page = (report / "index.html").read_text()
    gil = page[page.index('<section id="gil">'):page.index('<section id="figures">')]
    headings = re.findall(r"<h3>(.*?)</h3>", gil)
    assert headings[:2] == ["gil_mode=held (B) against gil_mode=released (A)",
                            "gil_mode=released_aa (B) against gil_mode=released (A)"]
    assert "ratio to first" not in gil
    for c, part in zip(expected, gil.split("<h3>")[1:]):
        part = part[:part.index("</table>")]  # the primary metrics: the first table
        rows = re.findall(r"<tr><td>([^<]*)</td><td class=\"unit\">[^<]*</td><td>([^<]*)</td>"
                          r"<td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>"
                          r"<td class=\"unit\">(?:<b>)?([^<]*)", part)
        assert [r[0] for r in rows] == [m.metric for m in c.headline()]
        assert [r[0] for r in rows] == ["sched_call.p50", "sched_call.p99", "step_rate.per_s"]
        for row, m in zip(rows, c.headline()):
            ci = "–" if m.low != m.low else f"{fmt(m.low)} – {fmt(m.high)}"
            assert row[1:] == (fmt(m.median_a), fmt(m.median_b), fmt(m.ratio), ci,
                               m.says(c.arm_b))
    summary = (report / "summary.md").read_text()
    assert summary.index("### gil_mode=held (B) against gil_mode=released (A)") < \
        summary.index("### gil_mode=released_aa (B) against gil_mode=released (A)")
    # the arms in the workload's order, released first: the headline's ratios are to it
    head = page[page.index('<section id="summary">'):page.index('<section id="gil">')]
    assert re.search(r"<th>released</th><th>held</th><th>released_aa</th>"
                     r"<th>ratio to released</th>", head)
    assert "(B) against" not in head  # the verdict above is the comparison
