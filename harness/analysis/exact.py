"""A modeled run's tables against its baseline's, exactly: a modeled device and the
virtual clock make the steps, batches and requests tables a function of the workload and
the build, so any difference is a change in behaviour, named by its first difference.

The columns that time the host (the scheduler call, postprocess, the step, table
flushes) and the run's name are the only ones left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import pandas as pd

from ..record.run import Run

TABLES = ("steps", "batches", "requests")
# measured on the host even in a modeled run; and the run folder's name
HOST_COLUMNS = frozenset({"sched_cpp_ns", "sched_call_ns", "postprocess_ns", "step_ns",
                          "flush_ns", "run_id"})
ROW_KEY = {"steps": "step", "batches": "step", "requests": "request_id"}


@dataclass(frozen=True)
class Difference:
    """The first place the candidate's table differs from the baseline's."""

    table: str
    row: int                 # the row's position in the table
    key: str                 # "step 412" or "request_id 17": what the row is
    columns: List[str]       # the columns that differ there (or "rows" for a missing row)
    baseline: dict
    candidate: dict

    def __str__(self) -> str:
        return (f"{self.table}: first difference at {self.key} (row {self.row}), "
                f"column(s) {', '.join(self.columns)}")


def compared_columns(run: Run, table: str) -> List[str]:
    return [c for c in run.columns(table) if c not in HOST_COLUMNS]


def first_difference(baseline: Run, candidate: Run, table: str) -> Optional[Difference]:
    """The first row (in the table's order) where any compared column differs, or where
    one table ends before the other; None when equal. The compared columns are the
    baseline's, less HOST_COLUMNS; a column the candidate lacks differs at row 0."""
    columns = compared_columns(baseline, table)
    b = baseline.table(table, columns)
    present = set(candidate.columns(table))
    missing = [c for c in columns if c not in present]
    c = candidate.table(table, [x for x in columns if x in present])
    if table == "requests":  # written as requests leave the scheduler: order by id
        b = b.sort_values("request_id", kind="stable", ignore_index=True)
        c = c.sort_values("request_id", kind="stable", ignore_index=True)
    n = min(len(b), len(c))
    differs = np.zeros(n, bool)
    per_column = {}
    for col in columns:
        if col in missing:
            continue
        d = ~_equal(b[col].iloc[:n], c[col].iloc[:n])
        per_column[col] = d
        differs |= d
    if missing and n:
        differs[0] = True
    if differs.any():
        row = int(np.argmax(differs))
        cols = [col for col, d in per_column.items() if d[row]] + missing
    elif len(b) != len(c):
        row, cols = n, ["rows"]
    else:
        return None
    key = ROW_KEY[table]
    ref = b if row < len(b) else c
    return Difference(table, row, f"{key} {ref[key].iloc[row]}", cols,
                      _row(b, row, cols), _row(c, row, cols))


def _equal(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Element-wise equality, NaN equal to NaN, categories compared as their text."""
    if isinstance(a.dtype, pd.CategoricalDtype) or isinstance(b.dtype, pd.CategoricalDtype):
        a, b = a.astype(str), b.astype(str)
    x, y = a.to_numpy(), b.to_numpy()
    eq = x == y
    if x.dtype.kind == "f" and y.dtype.kind == "f":
        eq |= np.isnan(x) & np.isnan(y)
    return np.asarray(eq, bool)


def _row(frame: pd.DataFrame, row: int, cols) -> dict:
    if row >= len(frame):
        return {"rows": len(frame)}
    return {c: frame[c].iloc[row] for c in cols if c in frame.columns}
