"""The hardware page of a report (docs/report.md, "The hardware page"): it leads with the
answer (capacity, output tokens per device at capacity, goodput, attainment, the SLO) per
arm, draws each arm's capacity search, and keeps the harness host's own timings in a
section of their own, apart from the modeled devices' figures."""

import json
import re
from pathlib import Path

import pytest

from harness.analysis.report.headline import fmt
from harness.commands import main
from harness.record.run import Run
from tests.helpers import MODELED

pytestmark = pytest.mark.slow  # two whole capacity searches, then reports of them

# tests/test_capacity.py's serial workload: one request at a time at constant gaps.
SERIAL = ["--set", "engine.max_num_seqs=1", "--set", "trace.generate.arrival=constant",
          "--set", "trace.generate.requests=200", "--set", "trace.generate.prompt={fixed: 32}",
          "--set", "trace.generate.output={fixed: 8}"]


def _rows(html: str):
    """[(metric, [cells])] of the first table in `html`."""
    table = html[html.index("<table>"):html.index("</table>")]
    return [(m, re.findall(r"<td>([^<]*)</td>", rest))
            for m, rest in re.findall(r"<tr><td>([^<]*)</td><td class=\"unit\">[^<]*</td>(.*?)"
                                      r"</tr>", table)]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    root = tmp_path_factory.mktemp("capacity")
    path = root / "w.yaml"
    path.write_text(MODELED + f"output: {root / 'results'}\nname: small\nslo: {{ttft: 0.5}}\n")
    out = {}
    for device in ("H200", "B200"):
        argv = ["capacity", str(path), *SERIAL, "--set", f"device=modeled:{device}",
                "--resolution", "0.5", "--json"]
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(argv) == 0
        out[device] = json.loads(buf.getvalue())
    report = root / "report"
    assert main(["report", out["H200"]["folder"], out["B200"]["folder"], "-o",
                 str(report)]) == 0
    return out, report


def test_the_hardware_page_leads_with_the_answer(searched):
    out, report = searched
    page = (report / "index.html").read_text()
    order = [page.index(f'<section id="{s}">') for s in ("hardware", "summary", "host",
                                                           "figures")]
    assert order == sorted(order)
    hardware = page[order[0]:order[1]]
    rows = dict(_rows(hardware[hardware.index("The answer, per arm"):]))
    assert list(rows)[:5] == ["capacity", "output tokens per device", "goodput requests",
                              "goodput attainment", "slo ttft"]
    assert rows["capacity"][:2] == [fmt(out[d]["capacity"]["rate"]) for d in ("H200", "B200")]
    assert rows["capacity"][2] == fmt(out["B200"]["capacity"]["rate"]
                                      / out["H200"]["capacity"]["rate"])
    at = [Run.read(out[d]["capacity"]["run_dir"]) for d in ("H200", "B200")]
    assert rows["output tokens per device"][:2] == [
        fmt(r.value("throughput.output_tokens") / 8) for r in at]
    assert rows["goodput attainment"][:2] == [fmt(r.value("goodput.attainment")) for r in at]
    assert rows["slo ttft"][:2] == ["0.5", "0.5"]
    # the search drawn: a figure of the hardware section, its PNG among the report's files
    assert '<figure id="fig-capacity">' in hardware
    assert (report / "figures" / "capacity.png").stat().st_size > 0
    summary = (report / "summary.md").read_text()
    assert summary.index("| capacity | req/s |") < summary.index("## Summary") \
        < summary.index("## The harness host's own timings")


def test_the_hosts_own_timings_are_a_section_of_their_own(searched):
    _, report = searched
    page = (report / "index.html").read_text()
    summary = page[page.index('<section id="summary">'):page.index('<section id="host">')]
    host = page[page.index('<section id="host">'):page.index('<section id="figures">')]
    assert "<h2>The harness host's own timings</h2>" in host
    host_rows = [m for m, _ in _rows(host)]
    assert "sched_call p50" in host_rows and "step p50" in host_rows
    device_rows = [m for m, _ in _rows(summary)]
    assert "throughput output_tokens" in device_rows and "ttft p99" in device_rows
    for row in host_rows:  # apart: no host row among the devices', none of theirs here
        assert row not in device_rows
    assert not {"ttft p99", "throughput output_tokens"} & set(host_rows)


def test_a_run_outside_a_search_has_no_capacity_row(tmp_path, capsys):
    from tests.helpers import modeled_runs

    (h200,) = modeled_runs(tmp_path / "h200", "slo={ttft: 0.5}")
    (b200,) = modeled_runs(tmp_path / "b200", "device=modeled:B200", "slo={ttft: 0.5}")
    assert main(["report", str(h200), str(b200), "-o", str(tmp_path / "r")]) == 0
    page = (Path(tmp_path / "r") / "index.html").read_text()
    hardware = page[page.index('<section id="hardware">'):page.index('<section id="summary">')]
    rows = [m for m, _ in _rows(hardware[hardware.index("The answer, per arm"):])]
    assert rows[0] == "output tokens per device" and "capacity" not in rows
    assert not (tmp_path / "r" / "figures" / "capacity.png").exists()
