"""One run as the report reads it: the run (harness/record/run.py) with, from its big
tables, only the columns a figure asks for (column projection), each read once, as numpy
arrays (nulls as NaN, text as str)."""

from __future__ import annotations

from functools import cached_property
from typing import Dict, Sequence

import numpy as np
import pandas as pd

from ...errors import BadInput
from ...record import device_label
from ...record.run import POOLS, Run

KEY = "#step"  # step_key's entry among the columns read


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
    disaggregated = property(lambda self: self.run.disaggregated)
    kind = property(lambda self: device_label.kind(self.manifest))  # modeled, emulated, measured

    @property
    def profile(self) -> str:
        """The profile a modeled run's executor names ("B200", or a path: never opened,
        harness/analysis/report/hardware.py); empty for a measured run."""
        return (self.manifest.profile or "") if self.modeled else ""

    @property
    def engine(self) -> bool:
        """Whether the run had an engine of its own: not one against an endpoint, which
        has no steps or batches tables."""
        return self.run.manifest.target is None

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

    def step_key(self) -> np.ndarray:
        """Per steps-table row, its step as one integer: the step number in a co-located
        run; in a P/D run, whose instances number their own steps, one number per (role,
        instance, step). The rows of one step (its DP ranks) share it."""
        if ("steps", KEY) not in self._columns:
            if self.disaggregated:
                c = self.columns("steps", ["role", "instance", "step"])
                instance = c["instance"].astype(np.int64)
                pool = (c["role"] != POOLS[0]) * (int(instance.max()) + 1) + instance
                self._columns[("steps", KEY)] = pool * (int(c["step"].max()) + 1) + c["step"]
            else:
                self._columns[("steps", KEY)] = self.columns("steps", ["step"])["step"]
        return self._columns[("steps", KEY)]

    def idle_sums(self, names: Sequence[str]) -> Dict[str, np.ndarray]:
        """Per steps-table row, what its step's left-out idle ranks (docs/tables.md, "steps")
        add to a sum over the step's ranks of these count columns: their free KV blocks;
        nothing to any other count (a name left out), nor in a steps table from before idle
        rows were left out."""
        if "kv_blocks_free" not in names or "idle_kv_blocks_free" not in self.run.columns("steps"):
            return {}
        return {"kv_blocks_free":
                self.columns("steps", ["idle_kv_blocks_free"])["idle_kv_blocks_free"]}

    def instances(self, role: str):
        """[(instance, its steps-table rows as a mask)] of one pool of a P/D run, by
        instance."""
        c = self.columns("steps", ["role", "instance"])
        pool = c["role"] == role
        return [(int(i), pool & (c["instance"] == i))
                for i in np.unique(c["instance"][pool])]

    def pool_key(self, role: str, key: str):
        """A P/D pool's resolved workload key ("engine.num_kv_blocks"); None where absent."""
        return self.run.keys.get(f"deployment.{role}.{key}")

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
