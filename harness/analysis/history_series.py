"""The history's series: per metric and configuration, one row per commit in the order of
the commits' dates, the runs of one commit summarised by their median and range. A value
that is not a finite number (NaN or an infinity in a store's file) is left out of them,
and the commands say how many (`non_finite`)."""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

import numpy as np
import pandas as pd

from ..errors import BadInput
from .destination import listed
from .history_store import CONFIGURATION, LABELS

SERIES = (*CONFIGURATION, "metric", "stat")  # what one series shares
COLUMNS = [*SERIES, "backend", "unit", "commit", "commit_date", "host", "runs", "median",
           "min", "max"]


def parse_where(items: Iterable[str]) -> List[Tuple[str, str]]:
    """KEY=VALUE pairs; BadInput for one without `=` or with a key that is not a label."""
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or key not in LABELS:
            raise BadInput(f"--where {item}: expected KEY=VALUE with KEY one of "
                           f"{', '.join(LABELS)}")
        out.append((key, value))
    return out


def select(rows: pd.DataFrame, metric: Optional[str],
           where: Iterable[Tuple[str, str]]) -> pd.DataFrame:
    """The rows of `metric` ("ttft.p99", or "ttft" for its every stat) whose labels read as
    each VALUE (`modeled` as true or false); BadInput where none is left."""
    keep = pd.Series(True, index=rows.index)
    for key, value in where:
        text = rows[key].map(lambda v: str(v).lower() if isinstance(v, bool) else str(v))
        keep &= text == (value.lower() if key == "modeled" else value)
    if metric:
        # a benchmark's name may hold a dot: the whole name first
        of_metric = (rows["metric"] + "." + rows["stat"] == metric) | (rows["metric"] == metric)
        if not of_metric.any():
            known = sorted(set(rows["metric"] + "." + rows["stat"]))
            raise BadInput(f"--metric {metric}: the history store has no such metric (it "
                           f"holds {', '.join(known[:8])}{', ...' if len(known) > 8 else ''})")
        keep &= of_metric
    if not keep.any():
        raise BadInput("--where: no row of the history store matches")
    return rows[keep]


def non_finite(rows: pd.DataFrame) -> int:
    """How many of the rows' values series() leaves out: NaN and infinities."""
    return int((~np.isfinite(rows["value"].to_numpy(dtype=float))).sum())


def series(rows: pd.DataFrame) -> pd.DataFrame:
    """COLUMNS: one row per series and commit, ordered by series, then by commit date (a
    commit's earliest as given, the commit's name breaking ties); the values that are not
    finite left out (a commit with none left has no row). `host`: the hosts of the
    commit's runs."""
    rows = rows[np.isfinite(rows["value"].to_numpy(dtype=float))]
    grouped = rows.groupby([*SERIES, "commit"], sort=False, dropna=False)
    out = grouped.agg(backend=("backend", _one), unit=("unit", "first"),
                      commit_date=("commit_date", "min"),
                      host=("host", _hosts), runs=("run_key", "nunique"),
                      median=("value", "median"), min=("value", "min"),
                      max=("value", "max")).reset_index()
    out = out.sort_values([*SERIES, "commit_date", "commit"], kind="stable",
                          ignore_index=True)
    return out[COLUMNS]


def each_series(table: pd.DataFrame):
    """(series labels as a dict, its rows in commit order) for every series of `table`;
    the labels hold its hosts too (`host`: "ci-7", or "ci-7, ci-9 and ci-12") and its
    `backend` (cpu, cuda, npu; "" where not recorded, or not one)."""
    for key, part in table.groupby(list(SERIES), sort=False, dropna=False):
        hosts = sorted({h for text in part["host"] for h in str(text).split(", ")})
        yield (dict(zip(SERIES, key), backend=_one(part["backend"]), host=listed(hosts)),
               part.reset_index(drop=True))


def _hosts(hosts: pd.Series) -> str:
    return ", ".join(sorted(set(map(str, hosts))))


def _one(backends: pd.Series) -> str:
    """The one backend of the runs, "" where they recorded none or more than one."""
    found = set(map(str, backends))
    return found.pop() if len(found) == 1 else ""
