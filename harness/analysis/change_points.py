"""Change points in the history's series, by Apache Otava's E-divisive means with its
Student's t-test significance test (Fleming et al., "Hunter", ICPE 2023): each series of
per-commit medians split where its mean shifts, each split kept only when the segments on
either side differ at p below `max_pvalue`, each holds MIN_SEGMENT commits or more, and
the means differ by more than the metric's noise floor (`noise_floor`: by what timed it). A change in the
metric's worse direction (harness/schema/summary.py `BETTER`; a benchmark's time lower) is
a regression."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import pandas as pd

from ..errors import BadInput
from ..schema.summary import HIGHER, HOST, LOWER, PARTS, RUN_CLOCK, find
from .history_bench import WORKLOAD, better_way
from .history_series import each_series

MAX_PVALUE = 0.001  # Otava's own default
WINDOW = 50  # commits per window of the split step (Otava's default)
# Commits on either side of a change point, at least: two a side of identical figures (a
# timing in whole microseconds) give p = 0 whatever the host did, and a CI job's first
# pushes would judge nothing else.
MIN_SEGMENT = 5
# The smallest change reported (of the segments' means, after / before or before / after,
# less 1), by what timed the metric's figures (docs/comparing.md, "Noise floors"). The
# host's: none by default (infinite: not judged). On a shared host they move with its load
# by more than any useful floor (an A/A history of 100 runs on the development host:
# sched_call.p50 by up to 61 %, step.mean 34-fold, a CPU device's TPOT p50 131-fold);
# `--noise-floor host=PCT` judges them where the runner is dedicated and quiet. A
# benchmark's median of many rounds; a measured run's clock on an accelerator (not
# measured here). The rest (a modeled run's virtual clock, counts) is exact: any change
# is reported.
NOISE_FLOORS = {"host": math.inf, "bench": 0.10, "device": 0.05}
# --min-change's largest, in percent: an elevenfold change (after / before or before / after,
# less 1). A floor above it would hide every change anyone looks for, and an infinite one
# all of them while the summary printed "inf%".
MAX_MIN_CHANGE = 1000.0
# Readings of the whole host, not of the run: what its other work does (with the host's).
HOST_READINGS = ("host_cpu", "host_mem_used")

@dataclass(frozen=True)
class ChangePoint:
    """Between two adjacent commits of one series, the means of its segments either side."""

    series: dict
    commit_before: str
    commit_after: str
    date_after: str
    mean_before: float
    mean_after: float
    change_pct: float  # NaN where mean_before is 0: a change from 0 has no percentage
    pvalue: float
    direction: str  # HIGHER or LOWER: where the metric went
    regression: bool
    noise_floor: float  # the smallest change reported, as a fraction

    def to_dict(self) -> dict:
        out = asdict(self)
        return {**out.pop("series"), **out}

    def change_text(self) -> str:
        """The change as a person reads it: "+10.0%", or "from 0" where the mean before
        was 0 (no percentage: `change_pct` is NaN, null in JSON)."""
        return "from 0" if math.isnan(self.change_pct) else f"{self.change_pct:+.1f}%"


def floor_class(labels: dict) -> Optional[str]:
    """Which of NOISE_FLOORS a series' metric has: "bench" a benchmark's; "host" the
    harness's own host timings, the host's readings (HOST_READINGS), and a measured run's
    clock and step parts where the host's
    CPU did the device's work (backend cpu: a CPU device or an emulated one) or the store
    did not record which (backend ""); "device" those on an accelerator; None the rest
    (exact: a modeled run's, counts)."""
    if labels["workload"] == WORKLOAD:
        return "bench"
    metric = find(labels["metric"])
    if metric is None:
        return None
    if metric.clock == HOST or metric.name in HOST_READINGS:
        return "host"
    # a measured run's step parts are timed as its clock is, by the device it ran on
    if (metric.clock == RUN_CLOCK or metric.section == PARTS) and not labels["modeled"]:
        return "host" if labels.get("backend", "") in ("", "cpu") else "device"
    return None


def noise_floor(labels: dict, floors: Optional[Dict[str, float]] = None) -> float:
    """The smallest change of the series' metric reported, as a fraction: its class's
    floor (`floors`, default NOISE_FLOORS; infinite: not judged), 0 where it has none."""
    which = floor_class(labels)
    return (floors or NOISE_FLOORS)[which] if which else 0.0


def noise_floors(items: Iterable[str]) -> Dict[str, float]:
    """NOISE_FLOORS with `--noise-floor CLASS=PCT` items applied (`host=10%`, `device=2`);
    BadInput naming the option for a class that is not one or a percentage that is not a
    number of 0 or more."""
    floors = dict(NOISE_FLOORS)
    for item in items:  # a floor set is finite: the option judges, never hides
        name, eq, text = item.partition("=")
        try:
            pct = float(text.strip().removesuffix("%"))
        except ValueError:
            pct = float("nan")
        if not eq or name not in floors or not 0 <= pct < float("inf"):
            raise BadInput(f"--noise-floor {item}: expected CLASS=PCT with CLASS one of "
                           f"{', '.join(floors)} and PCT a percentage of 0 or more (host=10%)")
        floors[name] = pct / 100
    return floors


def detect(table: pd.DataFrame, max_pvalue: float = MAX_PVALUE, min_change: float = 0.0,
           floors: Optional[Dict[str, float]] = None) -> List[ChangePoint]:
    """Every change point of every series of `table` (history_series.series), a series
    at a time in its commits' order. `floors`: the noise floors by class (default
    NOISE_FLOORS); `min_change` (a fraction) raises every one to it. A series of fewer
    than 2 * MIN_SEGMENT commits (too_short) or of an infinite floor (not_judged) has none.
    ImportError where Otava is not installed, whatever the series."""
    import otava.analysis as otava

    out = []
    for labels, part in each_series(table):
        floor = max(min_change, noise_floor(labels, floors))
        if len(part) < 2 * MIN_SEGMENT or math.isinf(floor):
            continue
        values = [float(v) for v in part["median"]]
        scale = _exponent(values)
        for point in _split(otava, [math.ldexp(v, -scale) for v in values], max_pvalue,
                            floor):
            out.append(_change_point(labels, part, int(point.index), point.stats, floor,
                                     scale))
    return out


def _exponent(values: List[float]) -> int:
    """The power of two that brings the largest magnitude of `values` into [0.5, 1): the
    series divided by it before it is tested (exactly: a power of two), so that no sum or
    square overflows near the largest double (1e308 then -1e308 would read as flat) nor
    underflows near the smallest. The split, the t-test's p and the relative change are
    the same at any scale."""
    return math.frexp(max(map(abs, values), default=0.0))[1]


def too_short(table: pd.DataFrame) -> int:
    """The series of `table` detect() leaves unjudged: fewer than 2 * MIN_SEGMENT commits."""
    return sum(len(part) < 2 * MIN_SEGMENT for _, part in each_series(table))


def not_judged(table: pd.DataFrame, floors: Optional[Dict[str, float]] = None) -> int:
    """The other series of `table` detect() leaves unjudged: their floor is infinite (the
    host's, unless `floors` sets one)."""
    return sum(len(part) >= 2 * MIN_SEGMENT and math.isinf(noise_floor(labels, floors))
               for labels, part in each_series(table))


def _split(otava, values: List[float], max_pvalue: float, floor: float) -> list:
    """Otava's change points (its split and merge steps) with every segment MIN_SEGMENT
    commits or longer: the point beside the shortest segment removed (its neighbours'
    statistics taken again) and the merge step repeated until none is shorter."""
    points, _ = otava.compute_change_points(values, window_len=WINDOW, max_pvalue=max_pvalue,
                                            min_magnitude=floor)
    tester = otava.TTestSignificanceTester(max_pvalue)
    while points:
        shortest, at = min(_segments_beside(points, len(values)))
        if shortest >= MIN_SEGMENT:
            break
        del points[at]
        intervals = tester.get_intervals(points)
        for i in (at - 1, at):
            if 0 <= i < len(points):
                points[i] = tester.change_point(points[i].to_candidate(), values, intervals)
        points = otava.merge(points, values, max_pvalue, floor)
    return points


def _segments_beside(points: list, n: int) -> List[Tuple[int, int]]:
    """(the shorter of the two segments beside it, its position) for each change point."""
    bounds = [0, *(int(p.index) for p in points), n]
    return [(min(bounds[i + 1] - bounds[i], bounds[i + 2] - bounds[i + 1]), i)
            for i in range(len(points))]


def _change_point(labels: dict, part: pd.DataFrame, at: int, stats, floor: float,
                  scale: int) -> ChangePoint:
    """The change point at `at` of the series scaled by 2 ** -scale, in its own units."""
    before, after = (math.ldexp(float(mean), scale) for mean in (stats.mean_1, stats.mean_2))
    direction = HIGHER if after > before else LOWER
    good = better_way(labels)
    return ChangePoint(series=labels, commit_before=str(part["commit"].iloc[at - 1]),
                       commit_after=str(part["commit"].iloc[at]),
                       date_after=str(part["commit_date"].iloc[at]),
                       mean_before=before, mean_after=after,
                       change_pct=(after / before - 1) * 100 if before else float("nan"),
                       pvalue=float(stats.pvalue), direction=direction,
                       regression=good is not None and direction != good, noise_floor=floor)


def since_date(rows: pd.DataFrame, commit: Optional[str]) -> Optional[str]:
    """The date of `commit` in the store (its earliest); BadInput when it holds no such
    commit. A commit may be named by a prefix of its hash that names it alone."""
    if commit is None:
        return None
    commits = rows[["commit", "commit_date"]].drop_duplicates()
    match = commits[commits["commit"] == commit]
    if match.empty:
        match = commits[commits["commit"].str.startswith(commit)]
    if match["commit"].nunique() != 1:
        what = "no" if match.empty else "more than one"
        raise BadInput(f"--since {commit}: the history store holds {what} such commit")
    return str(match["commit_date"].min())


def regressions(points: List[ChangePoint], since: Optional[str]) -> List[ChangePoint]:
    """The regressions at or after the commit dated `since` (every one where None)."""
    return [p for p in points if p.regression and (since is None or p.date_after >= since)]
