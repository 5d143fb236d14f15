"""A sweep point without an answer, shown as such wherever a person reads the sweep: a real
capacity sweep of the tiny model whose points end with a lower bound (an answer), `none`
and `trace_too_short` (no answer), and refused; its text table and closing line, its exit
status and --json, its page's summary.md and figures, and the page in chromium; and a
hand-made table of failed, not run and refused points read back by `show` and drawn."""

import contextlib
import io
import json
from contextlib import contextmanager

import pytest

from harness.analysis.report.figures import canvas
from harness.commands import main
from harness.record.table_sink import write_table
from harness.sweeps.points import pool
from harness.sweeps.points.table import table
from tests.test_report_figures import clashes, drawn_figures
from tests.test_sweep_folder import InProcess
from tests.test_sweep_fronts import B200, H200, POINTS, row
from tests.test_sweep_points import TINY, sweep_file

pytestmark = pytest.mark.slow  # runs a capacity sweep and its report

# Zipped: a target every rate meets on a trace long enough to reach a steady state
# (at_least), one no rate meets (none), and a target met by 12 requests arriving at once (a
# batch of 12 at most) but not by twice as many, whose second 12 wait for the first's 64
# tokens (trace_too_short); the last point refused (no KV blocks).
SWEEP = """base: base.yaml
mode: capacity
axes:
  slo.ttft: [10, 0.000001, 0.001, 10]
  engine.max_num_seqs: [64, 64, 12, 64]
  trace.generate.output: [{fixed: 64}, {fixed: 64}, {fixed: 64}, {fixed: 64}]
  engine.num_kv_blocks: [256, 256, 256, 0]
  trace.generate.requests: [400, 12, 12, 12]
zip: [[slo.ttft, engine.max_num_seqs, trace.generate.output, engine.num_kv_blocks,
       trace.generate.requests]]
"""
CLOSING = ("4 points: 1 with an answer (1 a lower bound), 2 found no answer (none: 1, "
           "trace_too_short: 1), 1 refused")


def steptrace(*argv):
    """The command's exit status and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([str(a) for a in argv])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep run in this process (each point as it is submitted): its text, then its
    --json (resumed: nothing runs again), and its page."""
    tmp = tmp_path_factory.mktemp("shown")
    path = sweep_file(tmp, SWEEP, TINY + "slo: {ttft: 1}\n")

    @contextmanager
    def here(workers):
        yield InProcess()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pool, "host_pool", here)
        text = steptrace("sweep", path, "--set", f"output={tmp / 'out'}")
        document = steptrace("sweep", path, "--set", f"output={tmp / 'out'}", "--json")
    folder = tmp / "out" / "s"
    with drawn_figures() as figures:
        page = steptrace("report", folder, "-o", tmp / "page")
    yield dict(text=text, json=(document[0], json.loads(document[1])), page=page,
               figures=figures, folder=folder, out=tmp / "page")
    for fig in figures.values():
        canvas.plt.close(fig)


def test_the_text_says_each_points_state_and_closes_with_the_counts(swept):
    code, text = swept["text"]
    assert code == 0  # every valid point ran: a search that found none is no failure
    lines = text.splitlines()
    assert lines[-1] == CLOSING
    states = {line.split()[1]: line.split() for line in lines[2:-2] if line[:1] != " "}
    assert set(states) == {"at_least", "none", "trace_too_short", "refused"}
    for outcome in ("none", "trace_too_short"):  # no figure of a refuted answer, no star
        assert states[outcome][2:7] == ["-", "-", "-", "-", "slo.ttft=1e-06,"
                                        if outcome == "none" else "slo.ttft=0.001,"]
    assert states["at_least"][6] == "*"
    assert "no capacity: the answer misses the target on a trace twice as long" in text
    assert "no capacity: even the lowest rate probed missed the target" in text


def test_json_counts_the_states_and_names_each_rows(swept):
    code, document = swept["json"]
    assert code == 0
    assert (document["points"], document["done"], document["skipped"], document["failed"],
            document["refused"]) == (4, 3, 3, 0, 1)  # the table's statuses, as before
    assert (document["answered"], document["lower_bounds"], document["no_answer"],
            document["not_run"]) == (1, 1, {"none": 1, "trace_too_short": 1}, 0)
    shown = [(r["outcome"], r["state"], r["pareto"]) for r in document["rows"]]
    assert shown == [("at_least", "answer", True), ("none", "no answer", False),
                     ("trace_too_short", "no answer", False), (None, "refused", False)]


def test_summary_md_counts_and_lists_the_points_without_an_answer(swept):
    code, _ = swept["page"]
    assert code == 0
    summary = (swept["out"] / "summary.md").read_text()
    assert f"{CLOSING}; fronts by device." in summary
    listed = summary.partition("### Points without an answer")[2].splitlines()
    rows = [line.split(" | ") for line in listed if line.startswith("| ") and "---" not in
            line][1:]
    assert [(r[0], r[1], r[3][:40]) for r in rows] == [
        ("| no answer (none)", B200, "no capacity: even the lowest rate probed"),
        ("| no answer (trace_too_short)", B200, "no capacity: the answer misses the targe"),
        ("| refused", "-", rows[2][3][:40])]
    assert "num_kv_blocks" in rows[2][3]


def test_the_figure_draws_a_point_without_an_answer_on_the_axis_and_counts_the_rest(swept):
    """trace_too_short measured its tokens/s per user (at the answer it then refuted): a
    hollow triangle on the x axis, with a legend entry; `none` measured nothing: counted
    in the caption with the refused point."""
    fig = swept["figures"]["fronts_per_device"]
    (ax,) = fig.axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "no answer (1): no capacity found" in legend
    (triangles,) = [ln for ln in ax.lines if ln.get_marker() == "v" and len(ln.get_xdata())]
    assert list(triangles.get_ydata()) == [0] and triangles.get_markerfacecolor() == "none"
    assert clashes("fronts_per_device", fig) == []  # no two of its texts overlap
    html = (swept["out"] / "index.html").read_text()
    assert ("Hollow triangles on the x axis: 1 point(s) whose capacity search found no "
            "capacity") in html
    assert ("Not drawn: 1 point(s) whose capacity search found no capacity; 1 refused (the "
            "table of points without an answer, below, says why).") in html


def hand_made(tmp_path):
    """The eight points of tests/test_sweep_fronts.py and: a trace_too_short point whose
    figures would beat every B200 point, a failed, a not run and a refused point, and an
    H200 point with an answer but no tokens/s per user."""
    extra = [dict(row(B200, 32, 500, 5000, 1000), outcome="trace_too_short"),
             row(H200, 8, 1, 1, 1, status="failed", reason="RuntimeError: boom"),
             row(H200, 16, 1, 1, 1, status="failed", reason="not run"),
             row(H200, 32, 1, 1, 1, status="refused", reason="no KV blocks"),
             dict(row(H200, 64, 1, 300, 400), tokens_per_s_per_user=None)]
    folder = tmp_path / "sweep"
    folder.mkdir()
    write_table(table([row(*p) for p in POINTS] + extra, {}), folder, "sweep", "parquet")
    return folder


def test_a_point_without_an_answer_neither_joins_nor_beats_a_front(tmp_path):
    code, out = steptrace("show", hand_made(tmp_path), "--json")
    assert code == 0
    rows = {r["point"]: r for r in json.loads(out)["rows"]}
    assert rows["b20032"]["state"] == "no answer" and not rows["b20032"]["pareto"]
    assert rows["b20002"]["pareto"] and rows["b20016"]["pareto"]  # beaten by no answer


def test_show_says_failed_not_run_and_refused_apart(tmp_path):
    code, out = steptrace("show", hand_made(tmp_path))
    assert code == 0
    assert out.splitlines()[-1] == ("13 points: 9 with an answer, 1 found no answer "
                                    "(trace_too_short: 1), 1 failed, 1 not run, 1 refused")
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:-2]
             if line[:1] != " "}
    assert lines["h20016"][1:7] == ["not", "run", "-", "-", "-", "-"]
    assert lines["h20008"][1] == "failed"
    assert "RuntimeError: boom" in out


def test_the_caption_counts_every_point_left_out_by_why(tmp_path):
    with drawn_figures() as figures:
        code, _ = steptrace("report", hand_made(tmp_path), "-o", tmp_path / "page")
    for fig in figures.values():
        canvas.plt.close(fig)
    assert code == 0
    html = (tmp_path / "page" / "index.html").read_text()
    assert ("Not drawn: 1 point(s) of modeled:H200 with an answer but no output tok/s per "
            "device or tokens/s per user; 1 failed; 1 not run; 1 refused (the table of "
            "points without an answer, below, says why).") in html


@pytest.mark.slow  # starts a browser
def test_the_page_in_a_browser_lists_each_point_without_an_answer(swept):
    from tests.test_sweep_report import needs_chromium, opened

    if needs_chromium.args[0]:
        pytest.skip(needs_chromium.kwargs["reason"])
    seen = opened(swept["out"] / "index.html")
    assert CLOSING in seen["text"]
    assert "Every point has an answer" not in seen["text"]
    assert [s for s, _ in seen["not_done"]] == ["no answer", "no answer", "refused"]
    reasons = [r for _, r in seen["not_done"]]
    assert reasons[0].startswith("no capacity: even the lowest rate probed missed")
    assert reasons[1].startswith("no capacity: the answer misses the target on a trace")
