"""The regression gate: candidate runs against a baseline (docs/comparing.md, "The
gate").

Modeled runs are judged exactly (harness/analysis/exact.py): the steps, batches and
requests tables must equal the baseline's. Rules (harness/analysis/rules.py) judge summary
metrics with compare's noise-aware interval: a rule is broken when the candidate's median
moved past its limit and, with at least 3 runs a side, compare names a difference in that
direction; with fewer, the medians alone decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np

from ..commands.common import BadInput
from .compare import differing_keys, metric_result
from .exact import TABLES, first_difference
from .rules import Rule
from .runs import Run


@dataclass(frozen=True)
class Check:
    """One thing the gate judged: a table (exact) or a rule on a metric."""

    check: str       # "steps" or "ttft.p99"
    rule: str        # "equal (modeled)" or "max_increase 5%"
    baseline: object
    candidate: object
    broken: bool
    detail: str = ""


@dataclass
class GateResult:
    baseline: List[str]
    candidates: List[str]
    checks: List[Check] = field(default_factory=list)
    differing_keys: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not any(c.broken for c in self.checks)

    def to_dict(self) -> dict:
        return dict(passed=self.passed, baseline=self.baseline, candidates=self.candidates,
                    differing_keys={k: dict(baseline=a, candidate=b)
                                    for k, (a, b) in self.differing_keys.items()},
                    checks=[c.__dict__ for c in self.checks])


def gate(candidates: Sequence[Run], baseline: Sequence[Run],
         rules: Sequence[Rule] = ()) -> GateResult:
    """Judge the candidate runs against the baseline's. BadInput for runs that cannot be
    judged against each other: incomplete, another workload or trace, modeled against
    measured, a rule's metric missing from a candidate."""
    check_comparable(candidates, baseline)
    result = GateResult([str(r.path) for r in baseline], [str(r.path) for r in candidates],
                        differing_keys=differing_keys(baseline, candidates))
    if baseline[0].modeled:
        for run in candidates:
            for table in TABLES:
                result.checks.append(_exact(baseline[0], run, table))
    for rule in rules:
        result.checks.append(_judge(rule, baseline, candidates))
    return result


def check_complete(runs: Sequence[Run], role: str,
                   why: str = "the gate judges complete runs only") -> None:
    """BadInput naming the first run that is not complete and its state (failed with its
    manifest's error, killed, interrupted, running); `role` is what the run is to the gate
    ("baseline", "candidate")."""
    for run in runs:
        if not run.complete:
            raise BadInput(f"{run.path}: {role} run {run.condition}, not complete: {why}")


def check_comparable(candidates: Sequence[Run], baseline: Sequence[Run]) -> None:
    """BadInput unless every run is complete and of the baseline's workload, trace and kind
    (modeled or measured)."""
    check_complete(baseline, "baseline")
    check_complete(candidates, "candidate")
    ref = baseline[0]
    for run in (*baseline[1:], *candidates):
        if run.workload != ref.workload or run.trace_sha256 != ref.trace_sha256:
            raise BadInput(f"{run.path}: workload {run.workload!r} (trace_sha256 "
                           f"{run.trace_sha256[:12]}...), but the baseline {ref.path} is of "
                           f"workload {ref.workload!r} ({ref.trace_sha256[:12]}...): a baseline "
                           f"of another workload")
        if run.modeled != ref.modeled:
            kind = {True: "modeled", False: "measured"}
            raise BadInput(f"{run.path}: a {kind[run.modeled]} run, but the baseline {ref.path} "
                           f"is {kind[ref.modeled]}")


def _exact(baseline: Run, candidate: Run, table: str) -> Check:
    diff = first_difference(baseline, candidate, table)
    if diff is None:
        return Check(table, "equal (modeled)", "", "", False, f"{candidate.name}: equal")
    first = diff.columns[0]
    return Check(f"{table} @ {diff.key}", "equal (modeled)",
                 _text({first: diff.baseline.get(first)}),
                 _text({first: diff.candidate.get(first)}), True, f"{candidate.name}: {diff}")


def _judge(rule: Rule, baseline: Sequence[Run], candidates: Sequence[Run]) -> Check:
    for run in candidates:
        if math.isnan(run.value(rule.metric)):
            raise BadInput(f"{run.path}: no value of {rule.metric} in its summary (the rule "
                           f"{rule.metric}: {{{rule.kind}: ...}} needs one)")
    a = np.array([r.value(rule.metric) for r in baseline])
    b = np.array([r.value(rule.metric) for r in candidates])
    m = metric_result(rule.metric, baseline[0].units().get(rule.metric, ""), a, b)
    direction = "higher" if rule.kind == "max_increase" else "lower"
    moved = rule.broken_by(m.ratio)
    broken = moved and m.verdict in (direction, "too few runs")
    detail = f"ratio {m.ratio:.4g}; {m.says()}"
    return Check(rule.metric, str(rule), _text(m.median_a, m.unit), _text(m.median_b, m.unit),
                 broken, detail)


def _text(value, unit: Optional[str] = None) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items())
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}" + (f" {unit}" if unit else "")
    return str(value)
