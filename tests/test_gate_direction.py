"""steptrace gate says which way each checked figure moved: a rule's metric better or worse
by the rule's direction, a modeled table changed; a regression only where a rule says
worse, a change (still exit 1) where only the tables differ (docs/comparing.md, "The
gate")."""

import json

import numpy as np
import pytest

from harness.analysis.compare import metric_result
from harness.analysis.rules import KINDS, Rule
from harness.commands import main
from harness.record.run import Run
from tests.helpers import modeled_runs, synthetic_run

pytestmark = pytest.mark.core  # runs the engine


def measured(root, n, ttft, throughput):
    rng = np.random.default_rng(len(str(root)))
    for i in range(n):
        synthetic_run(root / f"r{i}", {
            "ttft.p99": (ttft * rng.normal(1, 0.005), "s"),
            "throughput.output_tokens": (throughput * rng.normal(1, 0.005), "tok/s")})
    return str(root)


@pytest.fixture
def rules(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("ttft.p99: {max_increase: 5%}\nthroughput.output_tokens: "
                    "{max_decrease: 3%}\n")
    return str(path)


def gated(capsys, *argv):
    """(exit status, --json document, text output) of one gate."""
    code = main(["gate", "--json", *argv])
    document = json.loads(capsys.readouterr().out)
    assert main(["gate", *argv]) == code
    return code, document, capsys.readouterr().out


def test_an_improvement_passes_and_says_better(tmp_path, capsys, rules):
    base = measured(tmp_path / "base", 4, 0.5, 100)
    cand = measured(tmp_path / "cand", 4, 0.3, 150)  # ttft 40 % lower, throughput 50 % up
    code, document, out = gated(capsys, cand, "--baseline", base, "--rules", rules)
    assert code == 0 and document["verdict"] == "pass"
    assert {c["check"]: c["moved"] for c in document["checks"]} == {
        "ttft.p99": "better", "throughput.output_tokens": "better"}
    assert ": pass" in out and "REGRESSION" not in out and "BROKEN" not in out
    assert out.count("ok, better") == 2


def test_a_regression_says_worse_and_the_other_figure_its_own_way(tmp_path, capsys, rules):
    base = measured(tmp_path / "base", 4, 0.5, 100)
    cand = measured(tmp_path / "cand", 4, 0.6, 101)  # ttft 20 % worse, throughput a bit up
    code, document, out = gated(capsys, cand, "--baseline", base, "--rules", rules)
    assert code == 1 and document["verdict"] == "regression"
    checks = {c["check"]: c for c in document["checks"]}
    assert checks["ttft.p99"]["broken"] and checks["ttft.p99"]["moved"] == "worse"
    assert checks["throughput.output_tokens"]["moved"] == "better"
    assert ": REGRESSION" in out and "BROKEN, worse" in out and "ok, better" in out


def test_worse_within_the_limit_passes_and_says_so(tmp_path, capsys, rules):
    base = measured(tmp_path / "base", 4, 0.5, 100)
    cand = measured(tmp_path / "cand", 4, 0.51, 99)  # both 1-2 % worse: inside the limits
    code, document, out = gated(capsys, cand, "--baseline", base, "--rules", rules)
    assert code == 0 and document["verdict"] == "pass"
    assert {c["moved"] for c in document["checks"]} == {"worse"}
    assert out.count("ok, worse") == 2


@pytest.fixture(scope="module")
def budgets(tmp_path_factory):
    """Two modeled runs of one workload, at most 2 sequences a step in the second."""
    root = tmp_path_factory.mktemp("budgets")
    (base,) = modeled_runs(root / "a")
    (cand,) = modeled_runs(root / "b", "engine.max_num_seqs=2")
    return str(base), str(cand)


def test_a_modeled_change_is_a_change_not_a_regression(budgets, capsys):
    base, cand = budgets
    code, document, out = gated(capsys, cand, "--baseline", base)
    assert code == 1 and document["verdict"] == "changed" and not document["passed"]
    changed = [c for c in document["checks"] if c["broken"]]
    assert changed and {c["moved"] for c in changed} == {"changed"}
    assert ": CHANGED" in out and "REGRESSION" not in out and "BROKEN" not in out
    assert "first difference at" in out  # the first difference, as before
    assert "neither better nor worse by itself" in out


def test_a_rule_says_which_way_a_changed_run_moved(budgets, capsys, tmp_path):
    """The tables changed and a rule judges a figure: better by the rule, still a change."""
    base, cand = budgets
    ratio = Run.read(cand).value("e2e.p50") / Run.read(base).value("e2e.p50")
    assert ratio != 1
    kind = "max_increase" if ratio < 1 else "max_decrease"  # the way the run moved: better
    rules = tmp_path / "rules.yaml"
    rules.write_text(f"e2e.p50: {{{kind}: 50%}}\n")
    code, document, out = gated(capsys, cand, "--baseline", base, "--rules", str(rules))
    assert code == 1 and document["verdict"] == "changed"
    (rule,) = [c for c in document["checks"] if c["check"] == "e2e.p50"]
    assert rule["moved"] == "better" and not rule["broken"]
    assert "ok, better" in out and ": CHANGED" in out


@pytest.mark.parametrize("runs", [4, 1])
def test_float_noise_is_unchanged_as_compare_has_it(tmp_path, capsys, rules, runs):
    """A ratio of 1 + 1e-9 was "ok, worse" where compare says no difference: runs within
    the noise, or one run a side a move that prints as 0.0 %."""
    def arm(name, factor):
        for i in range(runs):
            synthetic_run(tmp_path / name / f"r{i}", {
                "ttft.p99": (0.5 * (1 + 0.01 * i) * factor, "s"),
                "throughput.output_tokens": (100 * (1 + 0.01 * i) / factor, "tok/s")})
        return str(tmp_path / name)
    base, cand = arm("base", 1), arm("cand", 1 + 1e-9)
    code, document, out = gated(capsys, cand, "--baseline", base, "--rules", rules)
    assert code == 0 and document["verdict"] == "pass", out
    assert {c["check"]: c["moved"] for c in document["checks"]} == {
        "ttft.p99": "unchanged", "throughput.output_tokens": "unchanged"}
    assert out.count("ok, unchanged") == 2 and "worse" not in out and "better" not in out


def test_one_run_a_side_moves_by_the_medians(tmp_path, capsys, rules):
    """Too few runs for compare's verdict: the medians say which way, as they judge the
    rule."""
    base = synthetic_run(tmp_path / "base" / "r0", {"ttft.p99": (0.5, "s"),
                                                    "throughput.output_tokens": (100, "tok/s")})
    cand = synthetic_run(tmp_path / "cand" / "r0", {"ttft.p99": (0.51, "s"),
                                                    "throughput.output_tokens": (103, "tok/s")})
    code, document, out = gated(capsys, str(cand.parent), "--baseline", str(base.parent),
                                "--rules", rules)
    assert code == 0 and {c["check"]: c["moved"] for c in document["checks"]} == {
        "ttft.p99": "worse", "throughput.output_tokens": "better"}, out


def test_a_modeled_figure_equal_but_for_rounding_is_unchanged():
    """Deterministic values compare calls equal: the rule's words say unchanged."""
    a = np.array([0.5, 0.5])
    m = metric_result("ttft.p99", "s", a, a * (1 + 1e-12), exact=True)
    assert m.verdict == "equal" and m.ratio != 1
    for kind in KINDS:
        assert Rule("ttft.p99", kind, 0.05).moved(m.verdict, m.ratio) == "unchanged"
