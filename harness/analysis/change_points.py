"""Change points in the history's series, by Apache Otava's E-divisive means with its
Student's t-test significance test (Fleming et al., "Hunter", ICPE 2023): each series of
per-commit medians split where its mean shifts, each split kept only when the segments on
either side differ at p below `max_pvalue`. A change in the metric's worse direction
(harness/schema/summary.py `BETTER`; a benchmark's time lower) is a regression."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import List, Optional

import pandas as pd

from ..errors import BadInput
from ..schema.summary import HIGHER, LOWER
from .history_bench import better_way
from .history_series import each_series

MAX_PVALUE = 0.001  # Otava's own default
WINDOW = 50  # commits per window of the split step (Otava's default)


@dataclass(frozen=True)
class ChangePoint:
    """Between two adjacent commits of one series, the means of its segments either side."""

    series: dict
    commit_before: str
    commit_after: str
    date_after: str
    mean_before: float
    mean_after: float
    change_pct: float
    pvalue: float
    direction: str  # HIGHER or LOWER: where the metric went
    regression: bool

    def to_dict(self) -> dict:
        out = asdict(self)
        return {**out.pop("series"), **out}


def detect(table: pd.DataFrame, max_pvalue: float = MAX_PVALUE,
           min_change: float = 0.0) -> List[ChangePoint]:
    """Every change point of every series of `table` (history_series.series), a series
    at a time in its commits' order. `min_change` (a fraction) drops smaller changes."""
    from otava.analysis import compute_change_points

    out = []
    for labels, part in each_series(table):
        values = [float(v) for v in part["median"]]
        found, _ = compute_change_points(values, window_len=WINDOW, max_pvalue=max_pvalue,
                                         min_magnitude=min_change)
        for point in found:
            out.append(_change_point(labels, part, int(point.index), point.stats))
    return out


def _change_point(labels: dict, part: pd.DataFrame, at: int, stats) -> ChangePoint:
    before, after = float(stats.mean_1), float(stats.mean_2)
    direction = HIGHER if after > before else LOWER
    good = better_way(labels)
    return ChangePoint(series=labels, commit_before=str(part["commit"].iloc[at - 1]),
                       commit_after=str(part["commit"].iloc[at]),
                       date_after=str(part["commit_date"].iloc[at]),
                       mean_before=before, mean_after=after,
                       change_pct=(after / before - 1) * 100 if before else float("nan"),
                       pvalue=float(stats.pvalue), direction=direction,
                       regression=good is not None and direction != good)


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
