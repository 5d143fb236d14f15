"""The GIL A/B protocol: interleaved shuffled blocks, deterministic for a seed; the sweep
writes its gil table, one row per run, and every run its host share."""

import json
from collections import Counter

import pandas as pd
import pytest

from harness.sweeps.gil_protocol import plan, planned
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

ARMS = ("released", "held", "released_aa")


def test_blocks_hold_every_arm_once_in_a_seeded_order():
    runs = plan(ARMS, repeats=12, switch_intervals=[0.005, 0.001], seed=7)
    assert runs == plan(ARMS, repeats=12, switch_intervals=[0.005, 0.001], seed=7)
    assert [r.arm for r in runs] != [r.arm for r in plan(ARMS, 12, [0.005, 0.001], seed=8)]
    assert len(runs) == 2 * 12 * 3
    for interval in (0.005, 0.001):
        for block in range(12):
            mine = [r for r in runs if r.block == block and r.switch_interval_s == interval]
            assert sorted(r.arm for r in mine) == sorted(ARMS)
            assert [r.order for r in mine] == [0, 1, 2]
    orders = Counter(tuple(r.arm for r in runs[i:i + 3]) for i in range(0, len(runs), 3))
    assert len(orders) > 1  # shuffled, not one fixed order
    assert [r.switch_interval_s for r in runs[:36]] == [0.005] * 36  # one interval, then the next


def test_a_sweep_writes_its_gil_table(tmp_path):
    (tmp_path / "w.yaml").write_text(f"""
trace: {{generate: {{requests: 6, rate: 200.0, prompt: {{fixed: 16}}, output: {{fixed: 4}}}}}}
device: emulated:H200
model: deepseek-v3
precision: fp8
deployment: {{devices: 8, attention: {{tp: 8}}, moe: {{tp: 8}}, dense: {{tp: 8}}}}
emulated: {{launch_us: 10.0}}
engine: {{num_kv_blocks: 512, block_size: 64}}
gil_switch_interval_s: [0.005, 0.001]
calibration_requests: 0
telemetry: {{enabled: false}}
output: {tmp_path / "results"}
""")
    workload = load_workload(tmp_path / "w.yaml")
    runs = run_workload(workload)
    assert len(runs) == 2  # one per switch interval
    (sweep,) = (tmp_path / "results" / "w" / "sweeps").iterdir()
    gil = pd.read_parquet(sweep / "gil.parquet")
    assert gil["run_id"].tolist() == [r.name for r in runs]
    assert [(a, b, o, s) for a, b, o, s in gil[["arm", "block", "order", "switch_interval_s"]]
            .itertuples(index=False)] == [(r.arm, r.block, r.order, r.switch_interval_s)
                                          for r in planned(workload)]
    assert gil["steps_per_s"].gt(0).all() and gil["enqueue_drift_p99_s"].ge(0).all()
    for run in runs:
        manifest = json.loads((run.path / "manifest.json").read_text())
        assert set(manifest["host_share"]) == {"other_cpu_pct", "steal_pct", "threshold_pct",
                                               "contaminated"}
    assert {json.loads((r.path / "manifest.json").read_text())["switch_interval_s"]
            for r in runs} == {0.005, 0.001}


def test_the_gil_command_runs_both_arms_and_refuses_bad_input(tmp_path, monkeypatch, capsys):
    import harness.sweeps.sweep
    from harness.commands import main

    seen = []
    monkeypatch.setattr(harness.sweeps.sweep, "run_workload",
                        lambda workload, progress, stop, ran: seen.append(workload.arms) or [])
    (tmp_path / "w.yaml").write_text("trace: {generate: {requests: 2}}\n")
    assert main(["gil", str(tmp_path / "w.yaml"), "--set", "gil_aa=true"]) == 0
    assert seen == [("released", "held", "released_aa")]
    (tmp_path / "w.yaml").write_text("trace: {generate: {requests: 2}}\nrepeats: 0\n")
    assert main(["gil", str(tmp_path / "w.yaml")]) == 2
    assert "repeats: expected an integer >= 1, got 0" in capsys.readouterr().err


def test_the_gil_command_ends_with_the_verdict_of_each_arm(tmp_path, capsys):
    """Each arm against the released arm, on the primary metrics (docs/gil.md)."""
    from harness.commands import main
    from tests.helpers import MODELED

    (tmp_path / "w.yaml").write_text(MODELED + f"output: {tmp_path}\nrepeats: 2\n")
    assert main(["gil", str(tmp_path / "w.yaml"), "--set", "gil_aa=true", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline"] == "gil_mode=released" and len(data["runs"]) == 6
    assert [(c["arm_a"], c["arm_b"]) for c in data["comparisons"]] == [
        ("gil_mode=released", "gil_mode=held"), ("gil_mode=released", "gil_mode=released_aa")]
    assert data["comparisons"][0]["kind"] == "gil"
    # the primary metrics a modeled run has (no frontend thread on the virtual clock)
    assert data["comparisons"][0]["headline"] == ["sched_call.p50", "sched_call.p99",
                                                  "step_rate.per_s"]
    assert main(["gil", str(tmp_path / "w.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 runs (steptrace show RUN_DIR prints one's summary):")
    assert "A: gil_mode=released, 2 run(s)    B: gil_mode=held, 2 run(s)" in out


def test_the_gil_command_says_each_run_with_the_pace_and_the_time_left(tmp_path, capsys):
    """One progress line a run of the sweep, not the first run's requests alone: which run
    of how many, its arm, and from the first on the pace and (before the last) the time
    left."""
    import re

    from harness.commands import main
    from tests.helpers import MODELED

    (tmp_path / "w.yaml").write_text(MODELED + f"output: {tmp_path}\nrepeats: 2\n")
    assert main(["gil", str(tmp_path / "w.yaml")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "requests done" in line
             or line.startswith("  run ")]
    assert len(lines) == 4, lines
    for i, line in enumerate(lines, 1):
        assert re.fullmatch(rf"  run {i} of 4 written \((released|held), block [01], switch "
                            rf"interval 0.005 s\), [0-9.e+-]+ run/s"
                            rf"{', about [0-9]+ s left' if i < 4 else ''}", line), line
