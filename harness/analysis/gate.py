"""The regression gate: candidate runs against a baseline (docs/comparing.md, "The
gate").

Each candidate is judged against the baseline's runs of its arm: what tells the runs of a
sweep apart, less the repeat (gil_mode, overlap, device, switch interval). Modeled runs
are judged exactly (harness/analysis/exact.py): the steps, batches and requests tables
must equal those of the arm's first baseline run. Rules (harness/analysis/rules.py) judge
summary metrics arm by arm with compare's noise-aware interval: a rule is broken when the
candidates' median moved past its limit and, with at least 3 runs a side, compare names a
difference in that direction; with fewer, the medians alone decide.

The verdict: a broken rule is a regression (a figure moved the way its rule calls worse);
a difference in a modeled table alone is a change, neither better nor worse by itself:
both fail the gate, and only rules say which way a figure moved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import BadInput
from ..record.run import Run
from .compare import differing_keys, metric_result
from .exact import TABLES, first_difference
from .rules import Rule

EXACT = "equal (modeled)"  # the rule of an exact table check

@dataclass(frozen=True)
class Check:
    """One thing the gate judged: a table (exact) or a rule on a metric."""

    check: str       # "steps" or "ttft.p99"
    rule: str        # "equal (modeled)" or "max_increase 5%"
    baseline: object
    candidate: object
    broken: bool     # the check fails the gate: a table changed, or a rule's limit passed
    detail: str = ""
    arm: str = ""    # "gil_mode=held" where the runs gated hold more than one arm
    # which way the figure moved: a table "equal" or "changed"; a rule's metric "better",
    # "worse" (by the rule's direction: max_increase calls a rise worse) or "unchanged"
    moved: str = ""

    @property
    def result(self) -> str:
        """The check's result in words: ok, CHANGED (a table), BROKEN (a rule)."""
        if self.rule == EXACT:
            return "CHANGED" if self.broken else "ok"
        return f"{'BROKEN' if self.broken else 'ok'}, {self.moved}"


@dataclass
class GateResult:
    baseline: List[str]
    candidates: List[str]
    checks: List[Check] = field(default_factory=list)
    differing_keys: dict = field(default_factory=dict)
    arms: List[str] = field(default_factory=list)  # the arms judged, named as in Check.arm

    @property
    def passed(self) -> bool:
        return not any(c.broken for c in self.checks)

    @property
    def verdict(self) -> str:
        """pass; regression (a rule broken: a figure worse past its limit); changed (a
        modeled table differs, no rule broken: neither better nor worse by itself)."""
        broken = [c for c in self.checks if c.broken]
        if not broken:
            return "pass"
        return "changed" if all(c.rule == EXACT for c in broken) else "regression"

    def to_dict(self) -> dict:
        return dict(passed=self.passed, verdict=self.verdict, baseline=self.baseline,
                    candidates=self.candidates,
                    arms=self.arms, differing_keys={k: dict(baseline=a, candidate=b)
                                    for k, (a, b) in self.differing_keys.items()},
                    checks=[c.__dict__ for c in self.checks])


def gate(candidates: Sequence[Run], baseline: Sequence[Run],
         rules: Sequence[Rule] = ()) -> GateResult:
    """Judge each candidate run against the baseline's runs of its arm. BadInput for runs
    that cannot be judged against each other: incomplete, another workload or trace,
    modeled against measured, a candidate of an arm the baseline has no run of, a rule's
    metric missing from a candidate."""
    check_comparable(candidates, baseline)
    name = _arm_names((*candidates, *baseline))
    arms: Dict[tuple, Tuple[List[Run], List[Run]]] = {}  # arm: its baseline runs, candidates
    for run in baseline:
        arms.setdefault(_arm_key(run), ([], []))[0].append(run)
    for run in candidates:
        if _arm_key(run) not in arms:
            held = sorted({name(base[0]) for base, _ in arms.values()})
            raise BadInput(f"{run.path}: a candidate run of {name(run)}, an arm the baseline "
                           f"has no run of (its runs: {', '.join(held)}): a candidate is judged "
                           f"against the baseline's runs of its own arm")
        arms[_arm_key(run)][1].append(run)
    judged = sorted(((name(base[0]), base, runs) for base, runs in arms.values() if runs),
                    key=lambda j: j[0])
    used = [run for _, base, _ in judged for run in base]
    result = GateResult([str(r.path) for r in used], [str(r.path) for r in candidates],
                        differing_keys=differing_keys(used, candidates),
                        arms=[arm for arm, _, _ in judged if arm])
    for run in candidates:
        base = arms[_arm_key(run)][0]
        if base[0].modeled:  # an arm's runs are alike: its first one stands for them
            result.checks += [_exact(base[0], run, table, name(run)) for table in TABLES]
    for rule in rules:
        result.checks += [_judge(rule, base, runs, arm) for arm, base, runs in judged]
    return result


def _arm(run: Run) -> Dict[str, object]:
    """What tells the run's arm from the others of a sweep: its labels but its name and
    repeat, and its switch interval."""
    labels = {k: v for k, v in run.labels.items() if k not in ("run_id", "repeat")}
    return dict(labels, switch_interval_s=run.manifest.switch_interval_s)


def _arm_names(runs: Sequence[Run]) -> Callable[[Run], str]:
    """name(run): its arm by the labels that differ among `runs` ("gil_mode=held"); "" when
    the runs are all of one arm."""
    differ = [key for key in _arm(runs[0]) if len({repr(_arm(r)[key]) for r in runs}) > 1]
    return lambda run: ", ".join(f"{key}={_arm(run)[key]}" for key in differ)


def _arm_key(run: Run) -> tuple:
    return tuple((key, repr(value)) for key, value in _arm(run).items())


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


def _exact(baseline: Run, candidate: Run, table: str, arm_name: str) -> Check:
    diff = first_difference(baseline, candidate, table)
    if diff is None:
        return Check(table, EXACT, "", "", False, f"{candidate.name}: equal", arm_name,
                     "equal")
    first = diff.columns[0]
    return Check(f"{table} @ {diff.key}", EXACT, _text({first: diff.baseline.get(first)}),
                 _text({first: diff.candidate.get(first)}), True, f"{candidate.name}: {diff}",
                 arm_name, "changed")


def _judge(rule: Rule, baseline: Sequence[Run], candidates: Sequence[Run],
           arm_name: str) -> Check:
    for run in (*baseline, *candidates):
        if math.isnan(run.value(rule.metric)):
            raise BadInput(f"{run.path}: no value of {rule.metric} in its summary (the rule "
                           f"{rule.metric}: {{{rule.kind}: ...}} needs one)")
    a = np.array([r.value(rule.metric) for r in baseline])
    b = np.array([r.value(rule.metric) for r in candidates])
    m = metric_result(rule.metric, baseline[0].units().get(rule.metric, ""), a, b)
    if not math.isfinite(m.ratio):  # a median of 0 (or past a double): no ratio to limit
        raise BadInput(f"{rule.metric}: the baseline's median is {m.median_a:g} and the "
                       f"candidates' {m.median_b:g}: a limit relative to the baseline cannot "
                       f"judge them (the rule {rule})")
    direction = "higher" if rule.kind == "max_increase" else "lower"
    moved = rule.broken_by(m.ratio)
    broken = moved and m.verdict in (direction, "too few runs")
    detail = f"ratio {m.ratio:.4g}; {m.says()}"
    return Check(rule.metric, str(rule), _text(m.median_a, m.unit), _text(m.median_b, m.unit),
                 broken, detail, arm_name, rule.moved(m.verdict, m.ratio))


def _text(value, unit: Optional[str] = None) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items())
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}" + (f" {unit}" if unit else "")
    return str(value)
