"""One run as the report reads it: the run (harness/analysis/runs.py) with, from its big
tables, only the columns a figure asks for (column projection), each read once, as numpy
arrays (nulls as NaN, text as str)."""

from __future__ import annotations

from functools import cached_property
from typing import Dict, Sequence

import numpy as np
import pandas as pd

from ...errors import BadInput
from ..runs import Run


class RunData:
    def __init__(self, run: Run) -> None:
        self.run = run
        self._columns: Dict[tuple, np.ndarray] = {}

    name = property(lambda self: self.run.name)
    dir = property(lambda self: self.run.path)
    manifest = property(lambda self: self.run.manifest)
    complete = property(lambda self: self.run.complete)
    modeled = property(lambda self: self.run.modeled)
    device = property(lambda self: self.run.device)
    devices = property(lambda self: self.run.devices)
    gil_mode = property(lambda self: self.run.labels["gil_mode"])

    @property
    def profile(self) -> str:
        """The profile a modeled run's executor names ("B200", or a path: never opened,
        harness/analysis/report/hardware.py); empty for a measured run."""
        return str(self.manifest.get("executor", "")).partition(":")[2] if self.modeled else ""

    def has(self, table: str) -> bool:
        try:
            self.run.table_path(table)
        except BadInput:
            return False
        return True

    def columns(self, table: str, names: Sequence[str]) -> Dict[str, np.ndarray]:
        missing = [n for n in names if (table, n) not in self._columns]
        if missing:
            frame = self.run.table(table, missing)
            for n in missing:
                self._columns[(table, n)] = _array(frame[n])
        return {n: self._columns[(table, n)] for n in names}

    @cached_property
    def summary(self) -> Dict[tuple, tuple]:
        """(metric, stat) -> (value, unit)."""
        s = self.run.summary
        return {(m, st): (float(v), u) for m, st, v, u in
                zip(s["metric"], s["stat"], s["value"], s["unit"])}

    def stat(self, metric: str, stat: str) -> float:
        return self.summary.get((metric, stat), (float("nan"), ""))[0]


def _array(column: pd.Series) -> np.ndarray:
    if isinstance(column.dtype, pd.CategoricalDtype) or column.dtype == object:
        return column.astype(str).to_numpy()
    if column.dtype == bool:
        return column.to_numpy()
    return column.to_numpy(dtype=np.float64 if column.hasnans else None)
