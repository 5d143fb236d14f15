"""The busy-host flag where the numbers are printed (`run`, `show`, `show --json`, `gil`,
`compare`, `report`), and only for the figures a host's clock timed: every timing of a
measured run, the harness's own timings of a modeled one (docs/metrics.md, "Host-timed
figures")."""

import json

import pytest

from harness.analysis.compare import Arm, compare
from harness.analysis.report import comparison
from harness.analysis.report.arms import Arm as ReportArm
from harness.analysis.report.run_data import RunData
from harness.analysis.runs import load_runs
from harness.commands import main
from harness.record.busy_host import busy_host
from harness.run import end_to_end as run_module
from harness.schema.manifest import view
from harness.schema.summary import host_timed
from tests.helpers import MODELED, synthetic_run

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

BUSY = dict(other_cpu_pct=62.0, steal_pct=1.0, threshold_pct=10.0, contaminated=True)
QUIET = dict(other_cpu_pct=3.0, steal_pct=0.0, threshold_pct=10.0, contaminated=False)
ROWS = {"ttft.p99": (0.5, "s"), "throughput.output_tokens": (100.0, "tok/s"),
        "sched_call.p50": (2.0, "us"), "forward.p50": (50.0, "us"),
        "harness.per_step": (30.0, "us"), "requests.finished": (12.0, "requests")}


def test_which_figures_are_host_timed():
    for metric in ("sched_call", "sched_cpp", "step", "harness", "process_cpu",
                   "enqueue_drift", "delivery_delay", "frontend"):
        assert host_timed(metric, modeled=True) and host_timed(metric, modeled=False)
    for metric in ("ttft", "tpot", "itl", "e2e", "window", "throughput", "goodput", "forward",
                   "step_rate", "achieved", "mfu", "schedule_fidelity"):
        assert host_timed(metric, modeled=False) and not host_timed(metric, modeled=True)
    for metric in ("requests", "tokens", "slo", "prefix_cache", "host_cpu", "gpu0_util",
                   "energy", "attention", "unknown"):
        assert not host_timed(metric, modeled=False)


@pytest.mark.parametrize("modeled, share, timed", [
    (False, BUSY, ["ttft", "throughput", "sched_call", "forward", "harness"]),
    (True, BUSY, ["sched_call", "harness"]),
    (False, QUIET, None), (True, QUIET, None), (False, None, None)])
def test_busy_host_names_the_host_timed_metrics(modeled, share, timed):
    manifest = view(dict(modeled=modeled, **({"host_share": share} if share else {})))
    busy = busy_host(manifest, [(*name.split("."), v) for name, (v, _) in ROWS.items()])
    assert (busy and busy["host_timed"]) == timed
    if busy:
        assert (busy["other_cpu_pct"], busy["steal_pct"], busy["threshold_pct"]) == (62, 1, 10)


def test_a_run_without_a_host_timed_figure_is_not_flagged():
    modeled, measured = (view(dict(modeled=m, host_share=BUSY)) for m in (True, False))
    assert busy_host(modeled, [("ttft", "p99", 0.5), ("throughput", "requests", 9.0),
                               ("requests", "finished", 12.0)]) is None
    nothing_measured = [("sched_call", "count", 0.0), ("sched_call", "p50", float("nan")),
                        ("ttft", "p99", float("nan"))]  # stopped within its warm-up
    assert busy_host(measured, nothing_measured) is None
    assert busy_host(measured, nothing_measured + [("ttft", "p50", 0.1)])["host_timed"] == \
        ["ttft"]


@pytest.mark.parametrize("modeled", [False, True])
def test_show_says_it_under_the_summary_and_in_json(tmp_path, capsys, modeled):
    busy = synthetic_run(tmp_path / "busy", ROWS, modeled=modeled, host_share=BUSY)
    quiet = synthetic_run(tmp_path / "quiet", ROWS, modeled=modeled, host_share=QUIET)
    assert main(["show", str(busy)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("  note: busy host:") and "63%" in last
    assert ("sched_call, harness" in last) == modeled and ("measured" in last) != modeled
    assert main(["show", "--json", str(busy)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host_share"] == BUSY and data["busy_host"]["modeled"] == modeled
    assert any(n.startswith("busy host:") for n in data["notes"])
    assert main(["show", str(quiet)]) == 0
    assert "busy host" not in capsys.readouterr().out
    assert main(["show", "--json", str(quiet)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["busy_host"] is None and data["host_share"] == QUIET and data["notes"] == []


def test_compare_flags_only_the_rows_the_host_timed(tmp_path, capsys):
    a = [synthetic_run(tmp_path / "a" / f"r{i}", ROWS, modeled=True) for i in range(2)]
    b = [synthetic_run(tmp_path / "b" / "r0", ROWS, modeled=True, host_share=BUSY),
         synthetic_run(tmp_path / "b" / "r1", ROWS, modeled=True, host_share=QUIET)]
    result = compare(Arm("A", tuple(load_runs(map(str, a)))),
                     Arm("B", tuple(load_runs(map(str, b)))))
    assert list(result.busy_host) == [str(b[0])]
    assert result.metric("sched_call.p50").busy_runs == 1
    assert "busy host in 1 run(s)" in result.metric("sched_call.p50").says()
    for name in ("ttft.p99", "throughput.output_tokens", "forward.p50"):
        assert result.metric(name).busy_runs == 0 and "busy" not in result.metric(name).says()
    assert main(["compare", str(tmp_path / "a"), "--", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "busy host in 1 of 4 runs: other processes and steal time held 63% of" in out
    assert out.rstrip().endswith(f"of each it may have moved):\n  {b[0]}")
    assert main(["compare", "--drop-busy", str(tmp_path / "a"), "--",
                 str(tmp_path / "b")]) == 0
    assert "left out" in capsys.readouterr().out


def test_the_report_flags_the_busy_run(tmp_path):
    a = synthetic_run(tmp_path / "a", ROWS)
    b = synthetic_run(tmp_path / "b", ROWS, host_share=BUSY)
    arms = [ReportArm(label, "black", [RunData(run)], {})
            for label, run in zip("AB", load_runs([str(a), str(b)]))]
    rows = comparison.rows(arms)
    assert list(rows["flagged"]) == [str(b)] and "measured run" in rows["flagged"][str(b)]
    says = {r["metric"]: r["says"] for section in rows["sections"] for r in section["rows"]}
    assert "busy host" in says["ttft.p99"]


class _Share:
    """HostShare with a verdict chosen by the test."""

    share = BUSY

    def __init__(self, threshold_pct):
        pass

    def stop(self):
        return dict(_Share.share)


@pytest.mark.parametrize("share", [BUSY, QUIET])
def test_run_and_gil_print_it(tmp_path, capsys, monkeypatch, share):
    monkeypatch.setattr(run_module, "HostShare", _Share)
    monkeypatch.setattr(_Share, "share", share)
    workload = tmp_path / "w.yaml"
    workload.write_text(MODELED + f"output: {tmp_path}\nname: small\n")
    assert main(["run", str(workload)]) == 0
    out = capsys.readouterr().out
    assert ("note: busy host:" in out) == (share is BUSY)
    assert main(["gil", str(workload)]) == 0
    out = capsys.readouterr().out  # a line a run, the verdict's one line, the runs at the end
    assert out.count("busy host in 2 of 2 runs") == (1 if share is BUSY else 0)
    assert (out.splitlines()[-1].startswith("busy host: 2 of 2 runs")) == (share is BUSY)


def test_many_busy_runs_take_one_line_and_are_listed_once_at_the_end(tmp_path, capsys):
    """Thirty runs on a busy host: one line with the count and the range of other work's
    share before the table, each run named once after it; the report says the line and
    collapses the runs."""
    runs = {arm: [synthetic_run(tmp_path / arm / f"r{i}", ROWS, host_share=dict(
        BUSY, other_cpu_pct=20.0 + 2 * i + (arm == "b"))) for i in range(15)] for arm in "ab"}
    assert main(["compare", str(tmp_path / "a"), "--", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("  busy host")] == [
        "  busy host in 30 of 30 runs: other processes and steal time held 21% to 50% of the "
        "host's CPU (above gil_contamination_pct, 10%); this may have inflated their "
        "host-timed figures (each verdict counts its metric's runs on a busy host; "
        "--drop-busy leaves them out); the runs are listed at the end"]
    lines = out.splitlines()
    listed = lines.index("runs on a busy host (30; `steptrace show RUN` says which figures of "
                         "each it may have moved):")
    assert sorted(lines[listed + 1:]) == sorted(f"  {run}" for run in runs["a"] + runs["b"])
    assert not any(str(run) in line for line in lines[:listed] for run in runs["a"])
    arms = [ReportArm(label, "black", [RunData(r) for r in load_runs(map(str, runs[label]))],
                      {}) for label in "ab"]
    rows = comparison.rows(arms)
    assert rows["busy"].startswith("busy host in 30 of 30 runs") and len(rows["flagged"]) == 30


def test_the_host_share_is_of_the_hosts_counted_cpu_time(monkeypatch):
    """Shares of the CPU time the kernel counted over the run (not wall x cores): other
    processes' work and steal sum to at most 100 %."""
    from collections import namedtuple

    import harness.run.host_share as host_share

    times = namedtuple("scputimes", "user nice system idle iowait irq softirq steal")
    counters = iter([times(10, 0, 5, 100, 0, 0, 0, 1), times(16, 0, 7, 100.5, 0, 0, 0, 1.5)])
    monkeypatch.setattr(host_share.psutil, "cpu_times", lambda: next(counters))
    monkeypatch.setattr(host_share, "_own_cpu_s", lambda process, seen: None)  # owns nothing
    share = host_share.HostShare(threshold_pct=10.0).stop()
    # 8 s of work, 0.5 idle, 0.5 stolen: 9 s counted
    assert share["other_cpu_pct"] == pytest.approx(100 * 8 / 9)
    assert share["steal_pct"] == pytest.approx(100 * 0.5 / 9)
    assert share["other_cpu_pct"] + share["steal_pct"] == pytest.approx(100 * 8.5 / 9)
    assert share["contaminated"]
