"""Two arms of runs compared metric by metric: each arm's median over its runs, the ratio
B/A with its bootstrap interval over runs, the A/A noise floor, and a verdict
(docs/comparing.md). The arms are named by what differs between them, and the metrics
that matter for the kind of runs compared lead (harness/schema/summary.py).

`arms_by` and `compare` are the API; `Comparison.to_dict()` is what `--json` prints.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import BadInput
from ..record.busy_host import others_share
from ..record.run import Run
from ..schema.summary import COMPARISON_HEADLINE, TEXT_STATS
from ..schema.values import GIL_ARMS
from . import interval
from .parts_error import PartsComparison, compare_parts

# workload keys that differ between any two runs and say nothing about what was compared
NOT_COMPARED_KEYS = frozenset({"output"})
LABEL_KEYS = ("gil_mode", "device")
# The summary values a modeled run computes from its virtual clock and the device model
# alone: the same in every run of one workload and build. The host's timings are not. A P/D
# run's pools' rows are these under the pool's name (`decode_mfu`, `prefill0_prefix_cache`).
MODELED_METRICS = frozenset({"requests", "window", "throughput", "goodput", "ttft", "tpot",
                             "itl", "e2e", "queueing_delay", "achieved", "mfu",
                             "prefix_cache", "step_rate", "per_device", "kv_transfer",
                             "decode_wait", "decode_stall", "session_makespan",
                             "session_turns", "session_time", "session_prefix_hit",
                             "ttft_prefix_hit", "ttft_prefix_miss"})
_POOL = re.compile(r"(?:prefill|decode)\d*_")
# A change smaller than this prints as 0.0 % and its B/A as 1.000: it gets no verdict.
NEGLIGIBLE = 0.0005
# A noise floor beyond ±100 % (an arm's halves disagree by more than a factor of 2) says
# the setup cannot resolve the metric: a change within it is "too noisy", not "none".
NOISY = 1.0


@dataclass(frozen=True)
class Arm:
    """A named set of runs: the name says what they share ("gil_mode=held"); empty, it is
    named by what differs from the other arm (`compare`)."""

    name: str
    runs: Tuple[Run, ...]


@dataclass(frozen=True)
class MetricResult:
    """One metric across the two arms. `verdict` is one of: "higher", "lower", "none" (no
    detectable difference), "too noisy" (no detectable difference, and a noise floor beyond
    NOISY: these runs cannot tell), "equal" (deterministic values, the same in both arms),
    "too few runs" (an arm under interval.MIN_RUNS runs, no interval), "undefined" (no
    value in an arm, or A's median is 0). A deterministic value (a modeled run's, every run of
    an arm alike) is judged from one run: its interval is the ratio itself. A change that
    rounds to 0.0 % is not named ("equal" where deterministic, else "none"), and a metric
    0 in every run of both arms is "equal"."""

    metric: str
    unit: str
    runs_a: int
    runs_b: int
    median_a: float
    median_b: float
    ratio: float
    low: float
    high: float
    noise_floor: float  # ± as a fraction (0.04: ±4 %); NaN where no arm has >= 4 runs
    verdict: str
    busy_runs: int = 0  # runs compared whose host-timed figure of it a busy host may have moved

    @property
    def difference(self) -> bool:
        return self.verdict in ("higher", "lower")

    @property
    def deterministic(self) -> bool:
        return self.low == self.high == self.ratio

    @property
    def zero(self) -> bool:
        """0 in every run of both arms (judged "equal", with no ratio)."""
        return self.verdict == "equal" and self.median_a == self.median_b == 0

    def says(self, b: str = "B") -> str:
        """The verdict in words, arm B named `b`, and the runs on a busy host where the host
        timed it."""
        busy = f"; busy host in {self.busy_runs} run(s)" if self.busy_runs else ""
        return self._verdict(b) + busy

    def _verdict(self, b: str) -> str:
        floor = "unknown" if math.isnan(self.noise_floor) else f"±{self.noise_floor:.1%}"
        if self.zero:
            return "0 in both"
        if self.verdict == "equal":
            exactly = "" if self.ratio == 1 else " within 0.05%"
            return f"equal{exactly} (deterministic: modeled runs)"
        if self.verdict in ("higher", "lower") and self.deterministic:
            return f"{b} {self.verdict} by {self._change()} (deterministic: modeled runs)"
        if self.verdict in ("higher", "lower"):
            return f"{b} {self.verdict} by {self._change()} (noise floor {floor})"
        if self.verdict == "none":
            return f"no detectable difference (noise floor {floor})"
        if self.verdict == "too noisy":
            return f"too noisy to tell (noise floor beyond ±{NOISY:.0%}: an arm's runs " \
                f"disagree by more than a factor of {1 + NOISY:g}); more runs per arm or a " \
                f"quieter host would tell"
        if self.verdict == "too few runs":
            return f"no interval: {min(self.runs_a, self.runs_b)} run(s) in an arm, " \
                f"{interval.MIN_RUNS} needed"
        return "undefined (no value in an arm, A's median is 0 in the runs or resamples, or " \
            "a median or the ratio is past the largest double)"

    def _change(self) -> str:
        """B's difference from A: a percentage, or a factor where that runs to many digits."""
        if self.ratio < 100:
            return f"{abs(self.ratio - 1):.1%}"
        return f"a factor of {self.ratio:.3g}"


@dataclass
class Comparison:
    """The result of `compare`: the arms' runs, what was left out or flagged and why, the
    workload keys whose values differ between the arms, one MetricResult per metric (in
    the summary table's order), and the runs' kind, which picks the headline metrics."""

    arm_a: str
    arm_b: str
    runs_a: List[str]
    runs_b: List[str]
    left_out: Dict[str, str] = field(default_factory=dict)     # run folder -> why
    busy_host: Dict[str, dict] = field(default_factory=dict)  # run folder -> Run.busy_host
    differing_keys: Dict[str, Tuple[list, list]] = field(default_factory=dict)
    metrics: List[MetricResult] = field(default_factory=list)
    kind: str = "measured"  # a key of COMPARISON_HEADLINE
    step_parts: Optional[PartsComparison] = None  # a measured arm against a modeled one

    def headline(self) -> List[MetricResult]:
        """The metrics that matter for the runs' kind, in the catalogue's order."""
        names = {m.metric: m for m in self.metrics}
        return [names[f"{metric}.{stat}"] for metric, stat in COMPARISON_HEADLINE[self.kind]
                if f"{metric}.{stat}" in names]

    def others(self) -> List[MetricResult]:
        """The metrics not in the headline of the statistics a table shows (TEXT_STATS:
        p50, p99, mean, single values), in the summary table's order."""
        headline = {m.metric for m in self.headline()}
        return [m for m in self.metrics if m.metric not in headline
                and m.metric.partition(".")[2] in TEXT_STATS]

    def metric(self, name: str) -> MetricResult:
        """One metric's result by name ("ttft.p99"); KeyError if it was not compared."""
        for m in self.metrics:
            if m.metric == name:
                return m
        raise KeyError(name)

    def busy_line(self) -> str:
        """The runs on a busy host in one line, however many ("" where none): how many of
        the runs given, the range of other work's share of the host's CPU, and what it may
        have moved. The runs themselves are the page's to list once, after the table."""
        if not self.busy_host:
            return ""
        shares = sorted(others_share(b) for b in self.busy_host.values())
        held = f"{shares[0]:.0%}" if f"{shares[0]:.0%}" == f"{shares[-1]:.0%}" else \
            f"{shares[0]:.0%} to {shares[-1]:.0%}"
        above = ", ".join(f"{t:g}%" for t in
                          sorted({b["threshold_pct"] for b in self.busy_host.values()}))
        given = len(self.runs_a) + len(self.runs_b) + len(self.left_out)
        return (f"busy host in {len(self.busy_host)} of {given} runs: other processes and "
                f"steal time held {held} of the host's CPU (above gil_contamination_pct, "
                f"{above}); this may have inflated their host-timed figures (each verdict "
                f"counts its metric's runs on a busy host; --drop-busy leaves them out)")

    def to_dict(self) -> dict:
        """What --json prints; `step_parts` only where a measured arm meets a modeled one."""
        out = dict(arm_a=self.arm_a, arm_b=self.arm_b, runs_a=self.runs_a,
                   runs_b=self.runs_b, left_out=self.left_out, busy_host=self.busy_host,
                   differing_keys={k: dict(a=a, b=b) for k, (a, b) in
                                   self.differing_keys.items()},
                   kind=self.kind, headline=[m.metric for m in self.headline()],
                   metrics=[dict(asdict(m), says=m.says(self.arm_b)) for m in self.metrics])
        if self.step_parts is not None:
            out["step_parts"] = self.step_parts.to_dict()
        return out


def arms_by(runs: Sequence[Run], key: str, baseline: Optional[str] = None) -> List[Arm]:
    """An arm per value of a label (gil_mode, overlap, device, ...) or a workload key
    (engine.num_mtp, ...) among the runs: the baseline's first (the value `baseline`, else
    the first value in the runs' order; gil_mode's in a sweep's order of arms, released
    first), then the others in that order. BadInput unless
    two values or more occur, or where no run holds the baseline."""
    groups: Dict[str, List[Run]] = {}
    for run in runs:
        try:
            value = run.attribute(key)
        except KeyError:
            raise BadInput(f"--by {key}: {run.path} has no label or workload key {key!r} "
                           f"(labels: run_id, gil_mode, overlap, device, repeat; workload "
                           f"keys as in docs/workloads.md, e.g. engine.num_mtp)") from None
        groups.setdefault(str(value), []).append(run)
    if len(groups) < 2:
        raise BadInput(f"--by {key}: the runs hold {len(groups)} value(s) of {key} "
                       f"({', '.join(groups) or 'none'}); a comparison needs two or more")
    if key == "gil_mode":  # a GIL sweep's order of arms, not the order its runs ran in
        groups = dict(sorted(groups.items(), key=lambda kv: _arm_order(kv[0])))
    first = next(iter(groups)) if baseline is None else baseline
    if first not in groups:
        raise BadInput(f"--baseline {baseline}: no run has {key}={baseline} (the runs' "
                       f"values: {', '.join(groups)})")
    order = [first] + [v for v in groups if v != first]
    return [Arm(f"{key}={v}", tuple(groups[v])) for v in order]


def _arm_order(mode: str) -> int:
    return GIL_ARMS.index(mode) if mode in GIL_ARMS else len(GIL_ARMS)


def gil_arms(runs: Sequence[Run]) -> List[Arm]:
    """A GIL sweep's arms for its verdict (docs/gil.md): the released arm, then every other
    in a sweep's order of arms, over the complete runs; none unless they hold the released
    arm and another."""
    done = [r for r in runs if r.complete]
    modes = {r.labels["gil_mode"] for r in done}
    if len(modes) < 2 or "released" not in modes:
        return []
    return arms_by(done, "gil_mode", "released")


def compare(a: Arm, b: Arm, *, allow_different: bool = False,
            include_incomplete: bool = False, drop_busy: bool = False,
            parts: bool = False) -> Comparison:
    """Compare arm B against arm A. Runs of different traces are BadInput unless
    `allow_different`; incomplete runs are left out unless `include_incomplete`; runs on a
    busy host (where the host timed their figures: Run.busy_host) are flagged, and left out
    with `drop_busy`. With `parts`, a measured arm and a modeled one also have their step
    parts compared (parts_error; their steps tables are read)."""
    _check_traces(a.runs + b.runs, allow_different)
    left_out: Dict[str, str] = {}
    busy = {str(run.path): run.busy_host for run in a.runs + b.runs if run.busy_host}
    kept = []
    for arm in (a, b):
        keep = []
        for run in arm.runs:
            if not run.complete and not include_incomplete:
                left_out[str(run.path)] = f"{run.condition}, not complete"
            elif str(run.path) in busy and drop_busy:
                left_out[str(run.path)] = "busy host"
            else:
                keep.append(run)
        if not keep:
            why = "; ".join(f"{r.name}: {left_out[str(r.path)]}" for r in arm.runs)
            raise BadInput(f"arm {arm.name}: no run left to compare ({len(arm.runs)} given, "
                           f"all left out: {why})")
        kept.append(keep)
    runs_a, runs_b = kept
    differing = differing_keys(runs_a, runs_b)
    names = arm_names(runs_a, runs_b, differing)
    return Comparison(a.name or names[0], b.name or names[1], [str(r.path) for r in runs_a],
                      [str(r.path) for r in runs_b], left_out, busy, differing,
                      _metrics(runs_a, runs_b, busy), kind(runs_a + runs_b, differing),
                      compare_parts(runs_a, runs_b, differing) if parts else None)


def kind(runs: Sequence[Run], differing: Dict[str, Tuple[list, list]]) -> str:
    """"gil" where the arms differ by GIL mode, "modeled" where every run is, else
    "measured"."""
    if "gil_mode" in differing:
        return "gil"
    return "modeled" if all(r.modeled for r in runs) else "measured"


def arm_names(runs_a: Sequence[Run], runs_b: Sequence[Run],
              differing: Dict[str, Tuple[list, list]]) -> Tuple[str, str]:
    """The arms named by what tells them apart: the differing labels (gil_mode, device)
    that hold one value an arm, else such workload keys ("engine.num_mtp=1"); else the
    folders the arms' runs lie in; else "A" and "B"."""
    single = {k: (va[0], vb[0]) for k, (va, vb) in differing.items()
              if len(va) == len(vb) == 1}
    keys = [k for k in single if k in LABEL_KEYS] or list(single)
    if keys:
        a, b = (", ".join(f"{k}={single[k][i]}" for k in keys) for i in (0, 1))
        return a, b
    folders = _folder(runs_a), _folder(runs_b)
    if folders[0] and folders[1] and folders[0] != folders[1]:
        return folders[0], folders[1]
    return "A", "B"


def _folder(runs: Sequence[Run]) -> str:
    """The run's folder name for one run; the folder every run lies in for more; or ""."""
    if len(runs) == 1:
        return runs[0].name
    parents = {r.path.parent for r in runs}
    return parents.pop().name if len(parents) == 1 else ""


def differing_keys(runs_a: Sequence[Run], runs_b: Sequence[Run]) -> Dict[str, Tuple[list, list]]:
    """Workload keys and labels (gil_mode, device) whose values in arm A differ from arm
    B's: key -> (A's distinct values, B's). A key one arm's runs never recorded (made
    before the key existed) is not compared."""
    def values(runs, key):
        out = []
        for run in runs:
            v = run.labels[key] if key in LABEL_KEYS else run.keys.get(key)
            if v not in out:
                out.append(v)
        return out

    recorded = [set().union(*(run.keys for run in runs)) for runs in (runs_a, runs_b)]
    keys = set(LABEL_KEYS) | (recorded[0] & recorded[1]) - NOT_COMPARED_KEYS
    out = {}
    for key in sorted(keys):
        va, vb = values(runs_a, key), values(runs_b, key)
        if sorted(map(repr, va)) != sorted(map(repr, vb)):
            out[key] = (va, vb)
    return out


def _check_traces(runs: Sequence[Run], allow_different: bool) -> None:
    shas: Dict[str, Run] = {}
    for run in runs:
        shas.setdefault(run.trace_sha256, run)
    if len(shas) > 1 and not allow_different:
        (s1, r1), (s2, r2) = list(shas.items())[:2]
        raise BadInput(f"the runs replayed different traces: {r1.path} (trace_sha256 "
                       f"{s1[:12]}...) and {r2.path} ({s2[:12]}...); compare runs of one "
                       f"trace, or pass --allow-different")


def _metrics(runs_a: Sequence[Run], runs_b: Sequence[Run],
             busy: Dict[str, dict]) -> List[MetricResult]:
    values_a = [r.metrics() for r in runs_a]
    values_b = [r.metrics() for r in runs_b]
    units: Dict[str, str] = {}
    for run in (*runs_a, *runs_b):
        units = {**run.units(), **units}
    names = list(dict.fromkeys(n for v in values_a + values_b for n in v))
    modeled = all(r.modeled for r in (*runs_a, *runs_b))
    out = []
    for name in names:
        a = np.array([v.get(name, math.nan) for v in values_a])
        b = np.array([v.get(name, math.nan) for v in values_b])
        exact = modeled and _modeled(name.partition(".")[0])
        result = metric_result(name, units.get(name, ""), a, b, exact)
        timed = sum(name.partition(".")[0] in busy[str(r.path)]["host_timed"]
                    for r in (*runs_a, *runs_b) if str(r.path) in busy)
        out.append(replace(result, busy_runs=timed))
    return out


def _modeled(metric: str) -> bool:
    """Whether a modeled run's metric is one of MODELED_METRICS, a P/D pool's under its
    name (`decode_mfu`; `decode_wait` is the deployment's own)."""
    pool = _POOL.match(metric)
    return metric in MODELED_METRICS or bool(pool and metric[pool.end():] in MODELED_METRICS)


def metric_result(name: str, unit: str, a: np.ndarray, b: np.ndarray,
                  exact: bool = False) -> MetricResult:
    """One metric's values in arm A and arm B (one per run; NaN ones left out) judged.
    `exact`: the values are deterministic (MODELED_METRICS of modeled runs), so one run an
    arm decides where every run of the arm agrees."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    with np.errstate(over="ignore", invalid="ignore"):  # a spread past the largest double
        deterministic = exact and len(a) and len(b) and np.ptp(a) == 0 and np.ptp(b) == 0
    r = interval.ratio(a, b, min_runs=1 if deterministic else interval.MIN_RUNS)
    floors = [f.spread for f in (interval.noise_floor(a), interval.noise_floor(b))
              if f is not None and not math.isnan(f.spread)]
    floor = max(floors) if floors else math.nan
    if len(a) and len(b) and not a.any() and not b.any():
        verdict = "equal"  # 0 in every run: no ratio, nothing changed
    elif math.isnan(r.ratio):
        verdict = "undefined"
    elif deterministic:
        verdict = "equal" if abs(r.ratio - 1) < NEGLIGIBLE else \
            "higher" if r.ratio > 1 else "lower"
    elif not r.has_interval:  # too few runs, or resamples whose A median is 0
        verdict = "too few runs" if min(len(a), len(b)) < interval.MIN_RUNS else "undefined"
    elif r.excludes_one and (math.isnan(floor) or r.beyond(floor)) \
            and abs(r.ratio - 1) >= NEGLIGIBLE:  # a NaN floor: the interval alone decides
        verdict = "higher" if r.ratio > 1 else "lower"
    else:
        verdict = "too noisy" if floor > NOISY else "none"
    with np.errstate(over="ignore", invalid="ignore"):  # a median past it is inf
        median_a, median_b = (float(np.median(v)) if len(v) else math.nan for v in (a, b))
    return MetricResult(name, unit, len(a), len(b), median_a, median_b, r.ratio, r.low, r.high,
                        floor, verdict)
