"""One run folder as the report reads it: its manifest and summary whole, and from the
big tables only the columns a figure asks for (Parquet column projection), each read once."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Dict, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ...commands.common import BadInput


class RunData:
    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self._columns: Dict[tuple, np.ndarray] = {}
        path = self.dir / "manifest.json"
        try:
            self.manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise BadInput(f"{self.dir}: not a run folder (no manifest.json)") from None
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: unreadable ({e})") from None
        if not isinstance(self.manifest, dict) or "values" not in self.manifest:
            raise BadInput(f"{path}: not a run's manifest (no key 'values')")

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete"))

    @property
    def modeled(self) -> bool:
        return bool(self.manifest.get("modeled"))

    @property
    def device(self) -> str:
        """The device the engine ran on: the modeled profile, or the real device's name."""
        executor = str(self.manifest.get("executor") or "")
        if executor.startswith("modeled:"):
            return executor.split(":", 1)[1]
        return str(self.manifest.get("device", {}).get("name", "unknown"))

    @property
    def gil_mode(self) -> str:
        return str(self.manifest.get("gil_mode", ""))

    def has(self, table: str) -> bool:
        return self._path(table) is not None

    def _path(self, table: str):
        for fmt in ("parquet", "csv"):
            path = self.dir / f"{table}.{fmt}"
            if path.exists():
                return path
        return None

    def columns(self, table: str, names: Sequence[str]) -> Dict[str, np.ndarray]:
        """The named columns of a table as numpy arrays (nulls as NaN, text as str)."""
        missing = [n for n in names if (table, n) not in self._columns]
        if missing:
            self._read(table, missing)
        return {n: self._columns[(table, n)] for n in names}

    def _read(self, table: str, names) -> None:
        path = self._path(table)
        if path is None:
            raise BadInput(f"{self.dir}: no {table} table ({table}.parquet or {table}.csv)")
        try:
            if path.suffix == ".parquet":
                data = pq.read_table(path, columns=list(names))
            else:
                data = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
                    include_columns=list(names)))
        except (OSError, pa.ArrowException, KeyError) as e:
            raise BadInput(f"{path}: cannot read columns {', '.join(names)} ({e})") from None
        for n in names:
            if n not in data.column_names:
                raise BadInput(f"{path}: no column {n!r}")
            col = data.column(n)
            if pa.types.is_dictionary(col.type):
                col = col.cast(pa.string())
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                values = np.asarray(col.to_pylist(), dtype=object)
            elif pa.types.is_boolean(col.type):
                values = col.to_numpy(zero_copy_only=False).astype(bool)
            elif col.null_count:
                values = col.to_numpy(zero_copy_only=False).astype(np.float64)
            else:
                values = col.to_numpy(zero_copy_only=False)
            self._columns[(table, n)] = values

    @cached_property
    def summary(self) -> Dict[tuple, tuple]:
        """(metric, stat) -> (value, unit); empty for a run without a summary table."""
        if not self.has("summary"):
            return {}
        c = self.columns("summary", ["metric", "stat", "value", "unit"])
        return {(m, s): (float(v), u) for m, s, v, u in
                zip(c["metric"], c["stat"], c["value"], c["unit"])}

    def stat(self, metric: str, stat: str) -> float:
        return self.summary.get((metric, stat), (float("nan"), ""))[0]
