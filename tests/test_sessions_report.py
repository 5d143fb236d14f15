"""A session trace's runs read by `report`, `compare` and `gate`: the report's waterfall
of the longest sessions (each turn a bar from its arrival to its last token, the turns that
ran at once on rows of their own) and its prefix hit rate by turn (the summary's sums);
compare's and gate's text keep their columns for the longest session metric; gate's rules
judge the session rows."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from harness.analysis.report.figures.sessions import lanes
from harness.commands import main
from tests.test_report_figures import clashes, drawn_figures
from tests.test_sessions_workload import run, workload

pytestmark = pytest.mark.core

LATER = "session_prefix_hit.later_turns"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(a session run, the same with a KV pool too small to keep its sessions' prefixes)."""
    root = tmp_path_factory.mktemp("sessions")
    (root / "a").mkdir()
    (root / "b").mkdir()
    path = workload(root / "a")
    small = workload(root / "b", extra="").read_text().replace(
        "num_kv_blocks: 1024", "num_kv_blocks: 24")
    (root / "b" / "w.yaml").write_text(small)
    return run(path), run(root / "b" / "w.yaml")


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "r"
    with drawn_figures() as figures:
        assert main(["report", str(runs[0]), "-o", str(out)]) == 0
    yield out, figures
    plt.close("all")


def test_concurrent_turns_take_rows_of_their_own():
    # a root, two sub-agents started together, the next turn after both, then a rejected one
    arrival = np.array([0.0, 1.0, 1.0, 3.0, 5.0])
    end = np.array([0.5, 2.0, 2.5, 4.0, 5.0])
    assert lanes(arrival, end).tolist() == [0, 0, 1, 0, 0]
    assert lanes(np.array([0.0, 0.1, 0.2]), np.array([1.0, 1.0, 1.0])).tolist() == [0, 1, 2]


def test_the_waterfall_draws_each_turn_from_arrival_to_last_token(runs, report):
    out, figures = report
    sessions = pd.read_parquet(runs[0] / "sessions.parquet")
    rows = pd.read_parquet(runs[0] / "requests.parquet")
    ax = figures["session_waterfall"].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    longest = sessions.sort_values("makespan_s", ascending=False, kind="stable")
    assert labels == [str(s) for s in longest["session_id"][:len(labels)]]
    assert len(labels) == len(sessions)  # six sessions: every one fits
    bars = sorted((round(p.get_x(), 9), round(p.get_width(), 9)) for p in ax.patches)
    start = rows["session_id"].map(sessions.set_index("session_id")["start_s"])
    turns = sorted(zip((rows["arrival_s"] - start).round(9),
                       (rows["last_token_s"] - rows["arrival_s"]).round(9)))
    assert bars == turns
    heights = {round(p.get_height(), 2) for p in ax.patches}
    assert heights == {0.7, 0.45}  # the trace fans out: sub-agents ran beside each other
    assert not clashes("session_waterfall", figures["session_waterfall"])
    page = (out / "index.html").read_text()
    assert "Sessions: the longest, turn by turn" in page
    assert (out / "figures" / "session_waterfall.png").stat().st_size > 5_000


def test_the_hit_rate_by_turn_sums_as_the_summary(runs, report):
    _, figures = report
    (line,) = figures["session_prefix_hits"].axes[0].lines
    turn, share = line.get_xdata(), line.get_ydata()
    rows = pd.read_parquet(runs[0] / "requests.parquet")
    by = rows.groupby("turn")
    expect = by["prefix_hit_tokens"].sum() / by["prompt_len"].sum()
    assert turn.tolist() == expect.index.tolist()
    np.testing.assert_allclose(share, expect.to_numpy())
    summary = pd.read_parquet(runs[0] / "summary.parquet").set_index(["metric", "stat"])
    assert share[0] == pytest.approx(summary.loc[("session_prefix_hit", "first_turns"), "value"])
    assert share[1:].max() > share[0]  # a later turn hits its parent's context
    assert not clashes("session_prefix_hits", figures["session_prefix_hits"])


def test_a_request_traces_report_has_no_session_figure(tmp_path):
    from tests.helpers import modeled_runs

    (one,) = modeled_runs(tmp_path / "runs")
    with drawn_figures() as figures:
        assert main(["report", str(one), "-o", str(tmp_path / "r")]) == 0
    plt.close("all")
    assert not {"session_waterfall", "session_prefix_hits"} & set(figures)


def _table(lines, header):
    """The header line that starts with `header` and the lines after it."""
    top = next(i for i, line in enumerate(lines) if line.lstrip().startswith(header))
    return lines[top], lines[top + 1:]


def test_compare_keeps_its_columns_for_the_longest_metric(runs, capsys):
    assert main(["compare", str(runs[0]), "--", str(runs[1]), "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head, rows = _table(lines, "metric")
    unit_end = head.index("unit") + len("unit")
    (later,) = [r for r in rows if r.startswith(LATER + " ")]
    assert later[unit_end - len("fraction"):unit_end] == "fraction"
    b_median = head.index("B median") + len("B median")
    for r in rows:
        if r[:1].strip() and "." in r.split()[0]:  # a metric's row
            assert r[b_median - 1] != " " and r[b_median] == " ", r


def test_gate_rules_judge_the_session_rows(runs, tmp_path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"{LATER}: {{max_decrease: 5%}}\nsession_makespan.p99: "
                     f"{{max_increase: 50%}}\nsession_time.engine_share: {{max_increase: 50%}}\n")
    assert main(["gate", str(runs[0]), "--baseline", str(runs[0]), "--rules", str(rules)]) == 0
    assert ": pass" in capsys.readouterr().out
    assert main(["gate", str(runs[1]), "--baseline", str(runs[0]), "--rules", str(rules),
                 "--json"]) == 1
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks[LATER]["broken"] and checks[LATER]["moved"] == "worse"
    assert main(["gate", str(runs[1]), "--baseline", str(runs[0]), "--rules", str(rules)]) == 1
    lines = capsys.readouterr().out.splitlines()
    head = next(line for line in lines if line.lstrip().startswith("check"))
    rule = head.index("rule")
    (later,) = [line for line in lines if line.lstrip().startswith(LATER + " ")]
    assert later[rule:].startswith("max_decrease 5%")
    assert "REGRESSION" in lines[0]


def test_gate_names_the_session_metrics_a_rules_file_may_use(runs, tmp_path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text("session_prefix_hit.all_turns: {max_decrease: 5%}\n")
    assert main(["gate", str(runs[0]), "--baseline", str(runs[0]), "--rules", str(rules)]) == 2
    err = capsys.readouterr().err
    assert f"unknown metric (the baseline has session_prefix_hit.first_turns, {LATER})" in err
