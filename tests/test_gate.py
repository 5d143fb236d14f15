"""steptrace gate: the committed CI workload passes against its committed baseline on an
unchanged build and fails on a one-line scheduling change, naming the first differing
step and column; rules judge summary metrics; bad input exits 2 naming file and key."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

import harness.workload
from harness.commands import main
from harness.run import run_workload
from harness.workload import load_workload
from tests.helpers import MODELED, REPO, synthetic_run

WORKLOAD = REPO / "workloads" / "ci_gate.yaml"
BASELINE = str(REPO / "results" / "baselines" / "ci-gate")


def replay(out, *overrides):
    (run_dir,) = run_workload(load_workload(WORKLOAD, (f"output={out}", *overrides)))
    return str(run_dir)


@pytest.fixture(scope="module")
def candidate(tmp_path_factory):
    """The CI workload replayed by this build."""
    return replay(tmp_path_factory.mktemp("candidate"))


def test_an_unchanged_build_passes(candidate, capsys):
    assert main(["gate", candidate, "--baseline", BASELINE]) == 0
    out = capsys.readouterr().out
    assert ": pass" in out and "BROKEN" not in out
    assert main(["gate", "--json", candidate, "--baseline", BASELINE]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True
    assert [c["check"] for c in data["checks"]] == ["steps", "batches", "requests"]


def test_a_one_line_scheduling_change_is_caught(tmp_path, monkeypatch, capsys):
    config = harness.workload.SchedulerConfig  # the change: a smaller token budget per step
    monkeypatch.setattr(harness.workload, "SchedulerConfig",
                        lambda **kw: config(**{**kw, "max_num_batched_tokens": 1024}))
    changed = replay(tmp_path)
    assert main(["gate", "--json", changed, "--baseline", BASELINE]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is False and data["differing_keys"] == {}  # the workload is the same
    steps = next(c for c in data["checks"] if c["check"].startswith("steps @ step "))
    assert steps["broken"] and "steps: first difference at step " in steps["detail"]
    assert steps["baseline"].startswith("tokens_q=") and steps["candidate"] == "tokens_q=1024"
    assert "tokens_q" in steps["detail"]  # the budget caps a prompt step's tokens
    assert main(["gate", changed, "--baseline", BASELINE]) == 1
    assert "REGRESSION" in capsys.readouterr().out


def test_update_stores_a_small_baseline_the_gate_then_passes(candidate, tmp_path, capsys):
    stored = tmp_path / "baselines" / "mine"
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 0
    size = sum(p.stat().st_size for p in stored.rglob("*") if p.is_file())
    assert size < 400_000
    (run,) = stored.iterdir()
    assert sorted(p.name for p in run.iterdir()) == [
        "batches.parquet", "manifest.json", "requests.parquet", "steps.parquet",
        "summary.parquet"]
    columns = pq.read_schema(run / "steps.parquet").names
    assert "sched_cpp_ns" not in columns and "tokens_q" in columns  # host timings left out
    assert main(["gate", candidate, "--baseline", str(stored)]) == 0


def test_a_baseline_of_another_workload_is_bad_input(tmp_path, capsys):
    (tmp_path / "small.yaml").write_text("name: small\n" + MODELED)
    (other,) = run_workload(load_workload(tmp_path / "small.yaml", (f"output={tmp_path}",)))
    assert main(["gate", str(other), "--baseline", BASELINE]) == 2
    err = capsys.readouterr().err
    assert "workload 'small'" in err and "a baseline of another workload" in err


def test_a_missing_table_is_bad_input(candidate, tmp_path, capsys):
    broken = tmp_path / "run"
    shutil.copytree(candidate, broken)
    (broken / "batches.parquet").unlink()
    assert main(["gate", str(broken), "--baseline", BASELINE]) == 2
    assert f"{broken}: no batches table" in capsys.readouterr().err


def measured(root, name, n, ttft, seed):
    rng = np.random.default_rng(seed)
    for i in range(n):
        synthetic_run(root / f"{name}-r{i}", {
            "ttft.p99": (ttft * rng.normal(1, 0.01), "s"),
            "throughput.output_tokens": (100 * rng.normal(1, 0.01), "tok/s")})
    return str(root)


@pytest.mark.parametrize("slower, code", [(1.10, 1), (1.02, 0)])
def test_rules_judge_measured_metrics(tmp_path, capsys, slower, code):
    base = measured(tmp_path / "base", "b", 4, 0.5, 0)
    cand = measured(tmp_path / "cand", "c", 4, 0.5 * slower, 1)
    rules = tmp_path / "rules.yaml"
    rules.write_text("ttft.p99: {max_increase: 5%}\nthroughput.output_tokens: "
                     "{max_decrease: 3%}\n")
    assert main(["gate", "--json", cand, "--baseline", base, "--rules", str(rules)]) == code
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["ttft.p99"]["broken"] is (code == 1)
    assert checks["ttft.p99"]["rule"] == "max_increase 5%"
    assert not checks["throughput.output_tokens"]["broken"]


def test_a_measured_baseline_needs_rules(tmp_path, capsys):
    base = measured(tmp_path / "base", "b", 1, 0.5, 0)
    assert main(["gate", base, "--baseline", base]) == 2
    assert "judged by rules only: give --rules FILE" in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [
    ("ttft.p42: {max_increase: 5%}\n", ":1: ttft.p42: unknown metric (the baseline has ttft.p99)"),
    ("ttft.p99: {max_increase: five}\n", ":1: ttft.p99.max_increase: expected a percentage "
                                         "such as 5%"),
    ("ttft.p99: {max_increase: -5%}\n", ":1: ttft.p99.max_increase: expected a percentage"),
    ("ttft.p99:\n  max_rise: 5%\n", ":2: ttft.p99.max_rise: unknown rule; expected "
                                    "max_increase or max_decrease"),
    ("ttft.p99: 5%\n", ":1: ttft.p99: expected {max_increase: N%} or {max_decrease: N%}"),
    ("- ttft.p99\n", "expected a mapping of metric"),
])
def test_a_bad_rules_file_names_file_line_and_key(tmp_path, capsys, text, message):
    base = measured(tmp_path / "base", "b", 1, 0.5, 0)
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    assert main(["gate", base, "--baseline", base, "--rules", str(rules)]) == 2
    err = capsys.readouterr().err
    assert str(rules) in err and message in err, err


def test_gate_and_compare_import_no_torch():
    """They read result folders; importing torch (or the engine's forward) would cost them
    seconds."""
    script = f"""
import sys
from harness.commands import main
assert main(["gate", {BASELINE!r}, "--baseline", {BASELINE!r}]) == 0
assert main(["compare", {BASELINE!r}, "--", {BASELINE!r}]) == 0
print("torch" in sys.modules, file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "False"


def test_update_refuses_runs_that_differ(tmp_path, capsys):
    a = synthetic_run(tmp_path / "a", {"ttft.p99": (0.5, "s")}, gil_mode="held")
    b = synthetic_run(tmp_path / "b", {"ttft.p99": (0.5, "s")}, gil_mode="released")
    stored = tmp_path / "baseline"
    assert main(["gate", str(a), str(b), "--baseline", str(stored), "--update"]) == 2
    assert "gil_mode is 'held'" in capsys.readouterr().err and not stored.exists()
    c = synthetic_run(tmp_path / "c", {"ttft.p99": (0.5, "s")}, complete=False)
    assert main(["gate", str(a), str(c), "--baseline", str(stored), "--update"]) == 2
    assert "killed, not complete" in capsys.readouterr().err and not stored.exists()
