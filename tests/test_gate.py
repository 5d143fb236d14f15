"""steptrace gate: the committed CI workload passes against its committed baseline on an
unchanged build and fails on a one-line scheduling change, naming the first differing
step and column; rules judge summary metrics; bad input exits 2 naming file and key."""

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import harness.workload.load
from harness.analysis import baseline as baseline_module
from harness.commands import main
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from tests.helpers import ENOSPC, MODELED, REPO, FullDisk, modeled_runs, synthetic_run, within

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

WORKLOAD = REPO / "workloads" / "ci_gate.yaml"
BASELINE = str(REPO / "results" / "baselines" / "ci-gate")


def replay(out, *overrides):
    (run,) = run_workload(load_workload(WORKLOAD, (f"output={out}", *overrides)))
    return str(run.path)


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
    config = harness.workload.load.SchedulerConfig  # the change: a smaller token budget per step
    monkeypatch.setattr(harness.workload.load, "SchedulerConfig",
                        lambda **kw: config(**{**kw, "max_num_batched_tokens": 1024}))
    changed = replay(tmp_path)
    assert main(["gate", "--json", changed, "--baseline", BASELINE]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is False and data["differing_keys"] == {}  # the workload is the same
    steps = next(c for c in data["checks"] if c["check"].startswith("steps @ step "))
    assert steps["broken"] and "steps: first difference at step " in steps["detail"]
    assert steps["baseline"].startswith("tokens_q=") and steps["candidate"] == "tokens_q=1024"
    assert "tokens_q" in steps["detail"]  # the budget caps a prompt step's tokens
    assert data["verdict"] == "changed" and steps["moved"] == "changed"  # no rule: no worse
    assert main(["gate", changed, "--baseline", BASELINE]) == 1
    out = capsys.readouterr().out
    assert ": CHANGED" in out and "REGRESSION" not in out


def test_update_stores_a_small_baseline_the_gate_then_passes(candidate, tmp_path, capsys):
    stored = tmp_path / "baselines" / "mine"
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 0
    size = sum(p.stat().st_size for p in stored.rglob("*") if p.is_file())
    assert size < 400_000
    (run,) = [p for p in stored.iterdir() if p.is_dir()]
    assert sorted(p.name for p in run.iterdir()) == [
        "batches.parquet", "manifest.json", "requests.parquet", "steps.parquet",
        "summary.parquet"]
    columns = pq.read_schema(run / "steps.parquet").names
    assert "sched_cpp_ns" not in columns and "tokens_q" in columns  # host timings left out
    assert main(["gate", candidate, "--baseline", str(stored)]) == 0


def test_a_baseline_of_another_workload_is_bad_input(tmp_path, capsys):
    (tmp_path / "small.yaml").write_text("name: small\n" + MODELED)
    (run,) = run_workload(load_workload(tmp_path / "small.yaml", (f"output={tmp_path}",)))
    other = run.path
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


@pytest.mark.parametrize("limit", ["100%", "150%", "1.5"])
def test_a_decrease_limit_that_can_never_be_broken_is_refused(tmp_path, capsys, limit):
    base = measured(tmp_path / "base", "b", 1, 0.5, 0)
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"ttft.p99: {{max_increase: 5%}}\nthroughput.output_tokens:\n"
                     f"  max_decrease: {limit}\n")
    assert main(["gate", base, "--baseline", base, "--rules", str(rules)]) == 2
    refused(capsys, f"{rules}:3: throughput.output_tokens.max_decrease: {limit} can never be "
                    f"broken: a metric falls by 100% at most (to 0)")


# --- a sweep: each candidate against the baseline's runs of its arm ------------------------

@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A modeled GIL sweep, two runs an arm: released, held, released, held."""
    runs = modeled_runs(tmp_path_factory.mktemp("sweep"), "gil=both", "repeats=2")
    return runs[0].parent, runs


def test_a_sweep_gated_against_itself_passes(sweep, capsys):
    folder, runs = sweep
    assert main(["gate", "--json", str(folder), "--baseline", str(folder)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["differing_keys"] == {} and data["arms"] == ["gil_mode=held",
                                                             "gil_mode=released"]
    exact = [c for c in data["checks"] if c["rule"] == "equal (modeled)"]
    assert len(exact) == 3 * len(runs) and not any(c["broken"] for c in exact)
    assert {c["arm"] for c in exact} == {"gil_mode=held", "gil_mode=released"}
    held = [r for r in runs if "-held-" in r.name]
    assert main(["gate", *map(str, held), "--baseline", str(folder)]) == 0  # one arm of it
    assert ": pass" in capsys.readouterr().out


def test_a_candidate_of_an_arm_the_baseline_lacks_is_bad_input(sweep, capsys):
    _, runs = sweep
    released, held = runs[0], runs[1]
    assert main(["gate", str(held), "--baseline", str(released)]) == 2
    refused(capsys, f"{held}: a candidate run of gil_mode=held, an arm the baseline has no run "
                    f"of (its runs: gil_mode=released): a candidate is judged against the "
                    f"baseline's runs of its own arm")


def test_rules_judge_each_arm_against_its_own(tmp_path, capsys):
    """held's ttft is half released's: the released candidates match released, not the
    median of both arms."""
    base, cand = tmp_path / "base", tmp_path / "cand"
    for i in range(2):
        for mode, ttft in (("held", 0.5), ("released", 1.0)):
            synthetic_run(base / f"{mode}-r{i}", {"ttft.p99": (ttft, "s")}, gil_mode=mode)
    for i in range(2):
        synthetic_run(cand / f"released-r{i}", {"ttft.p99": (1.0, "s")})
    rules = tmp_path / "rules.yaml"
    rules.write_text("ttft.p99: {max_increase: 5%}\n")
    assert main(["gate", "--json", str(cand), "--baseline", str(base), "--rules",
                 str(rules)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["differing_keys"] == {} and data["arms"] == ["gil_mode=released"]
    (check,) = data["checks"]
    assert check["baseline"] == "1 s" and check["arm"] == "gil_mode=released"


@pytest.mark.parametrize("baseline", [0.0, float("nan")])
def test_a_rule_that_cannot_judge_its_baseline_is_bad_input(tmp_path, capsys, baseline):
    """A baseline median of 0 (or no value) leaves no ratio to limit: the rule used to pass
    whatever the candidate measured."""
    base = synthetic_run(tmp_path / "base", {"ttft.p99": (baseline, "s")})
    cand = synthetic_run(tmp_path / "cand", {"ttft.p99": (9.0, "s")})
    rules = tmp_path / "rules.yaml"
    rules.write_text("ttft.p99: {max_increase: 5%}\n")
    assert main(["gate", str(cand), "--baseline", str(base), "--rules", str(rules)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert ("the baseline's median is 0 and the candidates' 9" in err if baseline == 0
            else f"{base}: no value of ttft.p99 in its summary" in err)


def test_the_switch_interval_tells_arms_apart(tmp_path, capsys):
    base = synthetic_run(tmp_path / "base", {"ttft.p99": (0.5, "s")})
    cand = synthetic_run(tmp_path / "cand", {"ttft.p99": (0.5, "s")})
    for run, interval in ((base, 0.005), (cand, 0.001)):
        manifest = json.loads((run / "manifest.json").read_text())
        (run / "manifest.json").write_text(json.dumps(dict(manifest,
                                                           switch_interval_s=interval)))
    rules = tmp_path / "rules.yaml"
    rules.write_text("ttft.p99: {max_increase: 5%}\n")
    assert main(["gate", str(cand), "--baseline", str(base), "--rules", str(rules)]) == 2
    refused(capsys, f"{cand}: a candidate run of switch_interval_s=0.001, an arm the baseline "
                    f"has no run of (its runs: switch_interval_s=0.005)")


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


# --- what --update may replace (docs/comparing.md, "The gate") -------------------------

def tree(root):
    """Every path under root (hidden ones too) and its bytes: a folder byte for byte."""
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() and not p.is_symlink()
            else os.readlink(p) if p.is_symlink() else "folder" for p in root.rglob("*")}


def refused(capsys, *says):
    """Exit 2's one line on stderr, saying each of `says`; nothing on stdout."""
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("steptrace: error: ") and err.count("\n") == 1, err
    assert all(s in err for s in says), err
    return err


def results_folder(root, candidate):
    """What `steptrace run` leaves in results/: a workload's runs, a sweep, a README."""
    for i in range(3):
        shutil.copytree(candidate, root / "ci-gate" / f"run-{i}")
    (root / "sweeps").mkdir(parents=True)
    (root / "sweeps" / "gil.csv").write_text("gil_mode,n\nheld,1\n")
    (root / "README.md").write_text("my runs\n")
    return root


@pytest.mark.parametrize("target, says", [
    ("results", "results is not a baseline: it holds README.md, ci-gate/ (3 runs) and "
                "sweeps/ and no baseline.json"),
    ("results/ci-gate", "results/ci-gate is not a baseline: it holds 3 run folders and no "
                        "baseline.json"),
    ("results/ci-gate/run-1", "it holds a run's manifest.json (it is a run folder)"),
    ("results/sweeps", "it holds gil.csv and no baseline.json"),
])
def test_update_refuses_a_folder_it_did_not_make(candidate, tmp_path, monkeypatch, capsys,
                                                 target, says):
    monkeypatch.chdir(tmp_path)
    before = tree(results_folder(tmp_path / "results", candidate))
    assert main(["gate", candidate, "--baseline", target, "--update"]) == 2
    refused(capsys, says, "--update replaces only a baseline it made or creates a new one")
    assert tree(tmp_path / "results") == before


@pytest.mark.parametrize("where, says", [
    (lambda run: run, "is the candidate run"),
    (lambda run: run / "baseline", "lies inside the candidate run"),
    (lambda run: run / "manifest.json", "lies inside the candidate run"),
    (lambda run: run.parent, "holds the candidate run"),
])
def test_update_refuses_a_baseline_that_is_holds_or_lies_in_a_candidate(
        candidate, tmp_path, capsys, where, says):
    run = tmp_path / "results" / "ci-gate" / "run"
    shutil.copytree(candidate, run)
    before = tree(tmp_path)
    assert main(["gate", str(run), "--baseline", str(where(run)), "--update"]) == 2
    refused(capsys, f"{where(run)}: {says} {run}")
    assert tree(tmp_path) == before


def test_update_refuses_a_baseline_inside_a_run_or_another_baseline(candidate, tmp_path,
                                                                    capsys):
    """gate and compare would read it as more runs of the folder around it."""
    other = tmp_path / "other-run"
    shutil.copytree(candidate, other)
    assert main(["gate", candidate, "--baseline", str(tmp_path / "base"), "--update"]) == 0
    capsys.readouterr()
    before = tree(tmp_path)
    for outer, kind in ((other, "run folder"), (tmp_path / "base", "baseline")):
        assert main(["gate", candidate, "--baseline", str(outer / "new"), "--update"]) == 2
        refused(capsys, f"{outer / 'new'}: lies inside the {kind} {outer}")
    assert tree(tmp_path) == before


def test_update_refuses_two_runs_of_one_name(candidate, tmp_path, capsys):
    for sweep in ("a", "b"):
        shutil.copytree(candidate, tmp_path / sweep / "r0")
    assert main(["gate", str(tmp_path / "a" / "r0"), str(tmp_path / "b" / "r0"), "--baseline",
                 str(tmp_path / "base"), "--update"]) == 2
    refused(capsys, "--update: 2 candidate runs named r0")
    assert not (tmp_path / "base").exists()


def test_update_refuses_a_symbolic_link_and_a_file(candidate, tmp_path, capsys):
    assert main(["gate", candidate, "--baseline", str(tmp_path / "base"), "--update"]) == 0
    (tmp_path / "link").symlink_to(tmp_path / "base")
    (tmp_path / "notes.txt").write_text("not a folder\n")
    capsys.readouterr()
    before = tree(tmp_path)
    assert main(["gate", candidate, "--baseline", str(tmp_path / "link"), "--update"]) == 2
    refused(capsys, f"{tmp_path / 'link'}: a symbolic link (to {tmp_path / 'base'})")
    assert main(["gate", candidate, "--baseline", str(tmp_path / "notes.txt"), "--update"]) == 2
    refused(capsys, f"{tmp_path / 'notes.txt'}: a file, not a folder")
    assert main(["gate", candidate, "--baseline", str(tmp_path / "notes.txt" / "base"),
                 "--update"]) == 2
    refused(capsys, f"inside {tmp_path / 'notes.txt'}, a file, not a folder")
    assert tree(tmp_path) == before


def test_update_replaces_a_baseline_it_made_and_nothing_else(candidate, tmp_path, capsys):
    stored = tmp_path / "base"
    first = tmp_path / "first" / "run-a"
    shutil.copytree(candidate, first)
    assert main(["gate", str(first), "--baseline", str(stored), "--update"]) == 0
    marker = json.loads((stored / "baseline.json").read_text())
    assert marker["kind"] == "steptrace gate baseline" and marker["runs"] == ["run-a"]
    assert marker["command"] == f"steptrace gate {first} --baseline {stored} --update"
    assert marker["stored"].startswith("20")  # an ISO date
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 0
    assert {p.name for p in stored.iterdir()} == {"baseline.json", Path(candidate).name}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "first"]  # nothing left
    (stored / "notes.md").write_text("why this baseline\n")  # not store()'s: not deleted
    before = tree(stored)
    capsys.readouterr()
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 2
    refused(capsys, f"{stored}: a baseline, but it also holds notes.md, which --update "
                    f"would delete")
    (stored / "notes.md").unlink()
    (stored / "baseline.json").write_text('{"kind": "my results"}\n')
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 2
    refused(capsys, f"{stored / 'baseline.json'}: not a baseline's marker")
    expected = {k: v for k, v in before.items() if k != "notes.md"}
    assert tree(stored) == {**expected, "baseline.json": b'{"kind": "my results"}\n'}


@pytest.fixture
def made(candidate, tmp_path, capsys):
    """A baseline --update made (a modeled run) and the name of its run."""
    stored = tmp_path / "bl1"
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 0
    capsys.readouterr()
    return stored, Path(candidate).name


def test_update_refuses_a_baseline_run_holding_files_it_did_not_write(candidate, tmp_path,
                                                                      capsys, made):
    stored, name = made
    (stored / name / "MY_NOTES.txt").write_text("notes\n")
    (stored / name / "sub").mkdir()
    (stored / name / "sub" / "keep.txt").write_text("x\n")
    before = tree(tmp_path)
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 2
    refused(capsys, f"{stored / name} holds MY_NOTES.txt and sub/, which --update would "
                    f"delete: move them out first")
    assert tree(tmp_path) == before


def test_update_refuses_a_baseline_holding_a_run_its_marker_does_not_list(candidate, tmp_path,
                                                                          capsys, made):
    stored, _ = made
    shutil.copytree(candidate, stored / "OTHER_RUN")
    before = tree(tmp_path)
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 2
    refused(capsys, f"{stored} holds OTHER_RUN, which its baseline.json does not list")
    assert tree(tmp_path) == before


def test_update_refuses_a_measured_baseline_run_holding_a_modeled_runs_tables(tmp_path,
                                                                              capsys):
    """What a trimmed run holds follows its manifest: a measured run keeps its summary."""
    run = synthetic_run(tmp_path / "runs" / "m", {"ttft.p99": (0.5, "s")})
    stored = tmp_path / "base"
    assert main(["gate", str(run), "--baseline", str(stored), "--update"]) == 0
    shutil.copyfile(run / "summary.parquet", stored / "m" / "steps.parquet")
    capsys.readouterr()
    before = tree(tmp_path)
    assert main(["gate", str(run), "--baseline", str(stored), "--update"]) == 2
    refused(capsys, f"{stored / 'm'} holds steps.parquet, which --update would delete")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("listed, says", [
    ([], "{bl} holds a and b, which its baseline.json does not list"),
    (["a", "b"], "{bl}/a holds device.parquet and result.json, which --update would delete"),
    (["a", "b", "c"], "{bl}/baseline.json lists c, which {bl} does not hold"),
    (["a", "../b"], "{bl} holds b, which its baseline.json does not list"),
    ("a", "{bl}/baseline.json: not a baseline's marker: \"runs\": expected a list of run "
          "folder names, got 'a'"),
])
def test_update_refuses_real_runs_under_a_forged_marker(candidate, tmp_path, capsys, listed,
                                                        says):
    bl = tmp_path / "bl"
    for name in ("a", "b"):
        shutil.copytree(candidate, bl / name)  # real runs: device.parquet and all
    (bl / "baseline.json").write_text(json.dumps({"kind": "steptrace gate baseline",
                                                  "runs": listed}))
    before = tree(tmp_path)
    assert main(["gate", candidate, "--baseline", str(bl), "--update"]) == 2
    refused(capsys, says.format(bl=bl))
    assert tree(tmp_path) == before


@pytest.mark.parametrize("damage, says", [
    ("deep", "baseline.json: not a baseline's marker: unreadable (JSON nested too deeply)"),
    ("fifo", "baseline.json: not a baseline's marker: is a FIFO (named pipe), not a regular "
             "file"),
    ("deep manifest", "manifest.json: unreadable (JSON nested too deeply): not a run "
                      "--update stored"),
    ("fifo manifest", "manifest.json: is a FIFO (named pipe), not a regular file: not a run "
                      "--update stored"),
])
def test_update_reads_a_deep_or_fifo_marker_as_no_marker(candidate, tmp_path, capsys, made,
                                                         damage, says):
    stored, name = made
    path = stored / (name + "/manifest.json" if "manifest" in damage else "baseline.json")
    path.unlink()
    if "fifo" in damage:
        os.mkfifo(path)
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)
    before = tree(tmp_path)
    with within(20):
        assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 2
    refused(capsys, says)
    assert tree(tmp_path) == before


def test_update_creates_a_baseline_in_an_empty_folder(candidate, tmp_path, capsys):
    (tmp_path / "base").mkdir()
    assert main(["gate", candidate, "--baseline", str(tmp_path / "base"), "--update"]) == 0
    assert {p.name for p in (tmp_path / "base").iterdir()} == {
        Path(candidate).name, "baseline.json"}


def test_the_committed_baseline_carries_its_marker(candidate, tmp_path, capsys):
    """--update may refresh it: CONTRIBUTING.md's command works on a copy."""
    copy = tmp_path / "ci-gate"
    shutil.copytree(BASELINE, copy)
    marker = json.loads((copy / "baseline.json").read_text())
    assert marker["kind"] == "steptrace gate baseline"
    assert marker["runs"] == [p.name for p in sorted(copy.iterdir()) if p.is_dir()]
    assert main(["gate", candidate, "--baseline", str(copy), "--update"]) == 0
    assert main(["gate", candidate, "--baseline", str(copy)]) == 0


# --- a replace is whole or not at all ----------------------------------------------------



@pytest.fixture
def previous(candidate, tmp_path, capsys):
    """A baseline stored earlier, and the folder around it byte for byte."""
    stored = tmp_path / "base"
    shutil.copytree(candidate, tmp_path / "old" / "run-old")
    assert main(["gate", str(tmp_path / "old" / "run-old"), "--baseline", str(stored),
                 "--update"]) == 0
    capsys.readouterr()
    return stored, tree(tmp_path)


@pytest.mark.parametrize("at", ["write", "fsync"])
def test_update_onto_a_full_disk_exits_1_and_keeps_the_previous_baseline(
        candidate, tmp_path, monkeypatch, capsys, previous, at):
    stored, before = previous
    if at == "write":  # the manifest fits, a table does not
        monkeypatch.setattr(baseline_module, "open",
                            lambda path, mode: FullDisk(open(path, mode), 4000), raising=False)
    else:
        def no_space(fd):
            raise OSError(errno.ENOSPC, ENOSPC)
        monkeypatch.setattr(os, "fsync", no_space)
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"steptrace: run failed: cannot write {stored}: {ENOSPC}\n"
    assert tree(tmp_path) == before


def test_update_past_a_file_size_limit_exits_1(candidate, tmp_path, previous):
    """A real write error from the kernel (RLIMIT_FSIZE: EFBIG), no injection: the steps
    table (about 125 KB) does not fit."""
    stored, before = previous

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
    proc = subprocess.run([sys.executable, "-m", "harness.commands", "gate", candidate,
                           "--baseline", str(stored), "--update"], cwd=REPO,
                          capture_output=True, text=True, preexec_fn=limit, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == f"steptrace: run failed: cannot write {stored}: File too large\n"
    assert tree(tmp_path) == before


def test_ctrl_c_while_storing_leaves_the_previous_baseline(candidate, tmp_path, monkeypatch,
                                                           capsys, previous):
    stored, before = previous
    write = pq.write_table

    def ctrl_c(*args, **kwargs):  # after the first table
        write(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(pq, "write_table", ctrl_c)
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == f"steptrace: interrupted by SIGINT: {stored} left as it was\n"
    assert tree(tmp_path) == before


def test_a_signal_during_the_swap_waits_for_it(candidate, tmp_path, monkeypatch, capsys,
                                               previous):
    """SIGTERM between moving the previous baseline aside and the new one in: the new one
    goes in, whole, then the command stops."""
    stored, _ = previous
    replace = os.replace

    def sigterm_after(src, dst):
        replace(src, dst)
        if Path(src) == stored:
            os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.setattr(os, "replace", sigterm_after)
    assert main(["gate", candidate, "--baseline", str(stored), "--update"]) == 143
    out, err = capsys.readouterr()
    assert out == "" and err == f"steptrace: interrupted by SIGTERM: {stored} replaced whole\n"
    assert {p.name for p in stored.iterdir()} == {"baseline.json", Path(candidate).name}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "old"]  # no .old, no .tmp


# --- bad input in a baseline or a run ------------------------------------------------------

@pytest.mark.parametrize("table", ["steps", "batches", "requests"])
@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_an_unreadable_table_names_its_file(candidate, tmp_path, capsys, table, damage):
    base = tmp_path / "ci-gate"
    shutil.copytree(BASELINE, base)
    (path,) = base.glob(f"*/{table}.parquet")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if damage == "truncated" else b"")
    before = tree(tmp_path)
    assert main(["gate", candidate, "--baseline", str(base)]) == 2
    refused(capsys, f"steptrace: error: {path}: unreadable (")
    assert main(["gate", str(path.parent), "--baseline", BASELINE]) == 2  # as a candidate
    refused(capsys, f"{path}: unreadable (")
    assert main(["gate", str(path.parent), "--baseline", str(tmp_path / "new"), "--update"]) == 2
    refused(capsys, f"{path}: unreadable (")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("role", ["candidate", "baseline", "--update source"])
def test_a_fifo_in_place_of_a_table_is_named_not_opened(candidate, tmp_path, role):
    """pyarrow would wait in open() for a writer, past SIGINT and SIGTERM: a subprocess, so
    a hang is a failure, not a stuck test run."""
    run = tmp_path / "run"
    shutil.copytree(candidate, run)
    (run / "batches.parquet").unlink()
    os.mkfifo(run / "batches.parquet")
    argv = {"candidate": [str(run), "--baseline", BASELINE],
            "baseline": [candidate, "--baseline", str(run)],
            "--update source": [str(run), "--baseline", str(tmp_path / "new"), "--update"]}[role]
    before = tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "harness.commands", "gate", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"steptrace: error: {run / 'batches.parquet'}: is a FIFO (named " \
                          f"pipe), not a regular file\n"
    assert tree(tmp_path) == before


def failed_copy(candidate, path):
    """The candidate as a run whose table could not be written: its manifest says so."""
    shutil.copytree(candidate, path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(complete=False, error=f"WriteFailed: cannot write "
                                          f"{path / 'batches.parquet'}: {ENOSPC}")
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_a_failed_run_is_named_with_its_error(candidate, tmp_path, capsys):
    failed = failed_copy(candidate, tmp_path / "failed")
    error = f"(WriteFailed: cannot write {failed / 'batches.parquet'}: {ENOSPC}), not complete"
    assert main(["gate", str(failed), "--baseline", BASELINE]) == 2
    refused(capsys, f"{failed}: candidate run failed {error}: the gate judges complete runs "
                    f"only")
    assert main(["gate", candidate, "--baseline", str(failed)]) == 2
    refused(capsys, f"{failed}: baseline run failed {error}")
    assert main(["gate", str(failed), "--baseline", str(tmp_path / "base"), "--update"]) == 2
    refused(capsys, f"{failed}: candidate run failed {error}: a baseline holds complete runs "
                    f"only")
    assert not (tmp_path / "base").exists()
