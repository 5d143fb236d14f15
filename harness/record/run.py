"""One run, read back from its folder (`Run.read`) or as the run just wrote it
(`Run.written`, its manifest and summary as held, not read again): its typed manifest
(harness/schema/manifest_view.py), state, summary rows and notes, its labels and workload
keys, and its tables on demand, each read once (harness/record/table_reader.py). What
`steptrace show`, `run`, `compare`, `report`, `gate`, `history` and a sweep read of a run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pandas as pd

from ..schema.manifest import Manifest, view
from . import run_folder
from .busy_host import busy_host
from .device_label import device_name
from .metrics import SUMMARY_COLUMNS
from .table_reader import read_table, table_columns, table_path

# Summary rows that count things or restate the workload: not metrics to compare.
NOT_METRICS = frozenset({"requests", "steps", "slo", "window", "tokens"})
POOLS = ("prefill", "decode")  # a P/D deployment's, in the order "xPyD" names them


@dataclass(frozen=True)
class Run:
    """One run folder. `summary` holds its summary rows (metric, stat, value, unit): the
    run's summary table, or for a run that did not finish, what its steps table says."""

    path: Path
    manifest: Manifest = field(repr=False)
    state: str
    summary: pd.DataFrame = field(repr=False)
    notes: tuple = ()
    _tables: Dict[tuple, pd.DataFrame] = field(  # each table as read: name, columns, rows
        default_factory=dict, repr=False, compare=False)

    @classmethod
    def read(cls, path: Path) -> Run:
        """The run in folder `path`; BadInput when it is not one (its manifest, or the
        summary of a run that ended, unreadable)."""
        path = Path(path)
        manifest = run_folder.read_manifest(path)
        state = run_folder.state(manifest)
        return cls._of(path, manifest, state, run_folder.summary_rows(path, state))

    @classmethod
    def written(cls, run_dir: Path, manifest: dict, summary: pd.DataFrame) -> Run:
        """The run as it was just written: its folder, its manifest as last written (taken
        as its JSON reads back) and its summary table, neither read again; its notes read
        the requests table where every request was rejected (the first one's reason)."""
        document = json.loads(json.dumps(manifest, default=str))
        typed = view(document)
        state = run_folder.state(typed)
        rows = summary[list(SUMMARY_COLUMNS)].to_dict("records")
        return cls._of(Path(run_dir), typed, state, rows)

    @classmethod
    def _of(cls, path: Path, manifest: Manifest, state: str, rows: List[dict]) -> Run:
        notes = run_folder.notes(manifest, rows, path, state)
        return cls(path, manifest, state, pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS)),
                   tuple(notes))

    def result(self) -> dict:
        """What `steptrace show --json` says of the run: its state, device, summary rows,
        host share, calibration and notes."""
        m, rows = self.manifest, self.summary.to_dict("records")
        return dict(run_dir=str(self.path), state=self.state, complete=self.complete,
                    device=device_name(m), modeled=self.modeled, gil_mode=m.gil_mode,
                    error=m.error if self.state == "failed" else None,
                    host_share=m.host_share, busy_host=self.busy_host,
                    calibration=m.calibration, summary=rows, notes=list(self.notes))

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    @property
    def condition(self) -> str:
        """The state, a failed run's error with it: `failed (RuntimeError: ...)`."""
        error = self.manifest.error if self.state == "failed" else None
        return f"{self.state} ({error})" if error else self.state

    @property
    def values(self) -> Dict[str, Any]:
        """The resolved workload's values, as the manifest holds them ({} if it has none)."""
        return self.manifest.values or {}

    @property
    def workload(self) -> str:
        """The workload's `name`."""
        return str(self.values.get("name", ""))

    @property
    def trace_sha256(self) -> str:
        return str(self.manifest.trace_sha256 or "")

    @property
    def modeled(self) -> bool:
        return bool(self.manifest.modeled)

    @property
    def device(self) -> str:
        """The device the numbers describe: the modeled one ("B200 (modeled)"), an emulated
        one with its host (record/device_label.py) or the one the run measured."""
        name = device_name(self.manifest)
        return f"{name} (modeled)" if self.modeled else name

    @property
    def devices(self) -> int:
        """The chips the run's steps ran on: its deployment's devices (a P/D deployment's:
        both pools' instances'), else dp_size x cp_size."""
        keys = self.keys
        if keys.get("deployment.prefill.instances"):
            return sum(int(keys[f"deployment.{role}.instances"])
                       * int(keys[f"deployment.{role}.devices"]) for role in POOLS)
        return int(keys.get("deployment.devices") or
                   int(keys.get("engine.dp_size") or 1) * int(keys.get("engine.cp_size") or 1))

    @property
    def disaggregated(self) -> bool:
        """A P/D deployment's run (docs/disaggregation.md): prefill and decode pools."""
        return bool(self.keys.get("deployment.prefill.instances"))

    @property
    def deployment(self) -> str:
        """"xPyD" for a P/D run (x prefill and y decode instances: "2P1D"), else
        "co-located"."""
        if not self.disaggregated:
            return "co-located"
        keys = self.keys
        return "{}P{}D".format(*(int(keys[f"deployment.{role}.instances"]) for role in POOLS))

    @property
    def layout(self) -> str:
        """The deployment in words: "2P1D: prefill 2 x 16 H800 (DP16, EP16), decode 1 x 16
        H800 (DP16, EP16)"; a co-located run's "8 H200 (attention TP8, dense TP8)"."""
        keys = self.keys
        if not self.disaggregated:
            devices = int(keys.get("deployment.devices") or 1)
            return f"{devices} {self.pool_device()}{_parallelism(keys, 'deployment.')}"
        pools = []
        for role in POOLS:
            at = f"deployment.{role}."
            pools.append(f"{role} {int(keys[at + 'instances'])} x {int(keys[at + 'devices'])} "
                         f"{self.pool_device(role)}"
                         f"{_parallelism(keys, at)}")
        return f"{self.deployment}: {', '.join(pools)}"

    def pool_device(self, role: Optional[str] = None) -> str:
        """The device a P/D pool (None: the run) runs on, by its profile's name ("H800"):
        the pool's `device`, else the run's."""
        device = self.keys.get(f"deployment.{role}.device") if role else None
        if device:
            return str(device).partition(":")[2] or str(device)
        return self.device.removesuffix(" (modeled)")

    @property
    def labels(self) -> Dict[str, object]:
        """What tells the runs of a sweep apart: run_id, gil_mode, overlap, device,
        repeat."""
        return dict(run_id=self.name, gil_mode=self.manifest.gil_mode,
                    overlap=self.keys.get("engine.overlap"), device=self.device,
                    repeat=self.manifest.repeat)

    @property
    def keys(self) -> Dict[str, Any]:
        """The resolved workload keys, flattened: {"engine.overlap": True, "model":
        "tiny", ...} (the manifest's JSON values)."""
        return flatten(self.values)

    def attribute(self, key: str):
        """A label or a workload key by name (labels first); KeyError if neither."""
        labels = self.labels
        if key in labels:
            return labels[key]
        return self.keys[key]

    def metrics(self) -> Dict[str, float]:
        """Every comparable summary value by name, "ttft.p99": 0.123 (NaN ones included)."""
        rows = self.summary[~self.summary["metric"].isin(NOT_METRICS)
                            & (self.summary["stat"] != "count")]
        return {f"{m}.{s}": float(v) for m, s, v in
                zip(rows["metric"], rows["stat"], rows["value"])}

    def units(self) -> Dict[str, str]:
        return {f"{m}.{s}": u for m, s, u in
                zip(self.summary["metric"], self.summary["stat"], self.summary["unit"])}

    def value(self, name: str) -> float:
        """One summary value by name ("ttft.p99"); NaN when the run has no such row."""
        metric, _, stat = name.partition(".")
        rows = self.summary[(self.summary["metric"] == metric) & (self.summary["stat"] == stat)]
        return float(rows["value"].iloc[0]) if len(rows) else math.nan

    @property
    def busy_host(self) -> Optional[dict]:
        """The manifest's host share and the run's host-timed metrics, when a busy host
        may have moved them (harness/record/busy_host.py); None otherwise."""
        return busy_host(self.manifest, zip(self.summary["metric"], self.summary["stat"],
                                            self.summary["value"]))

    def table_path(self, name: str) -> Path:
        """The table's file; BadInput naming the folder where there is none, the file where
        it is not a regular file."""
        return table_path(self.path, name)

    def table(self, name: str, columns: Optional[Sequence[str]] = None,
              where: Optional[Tuple[str, object]] = None) -> pd.DataFrame:
        """One table of the run, only `columns` read (all when None), only the rows where
        `where`'s column holds its value (all when None), read once and kept. BadInput
        naming the file when the table or a column is missing or unreadable, or a column
        the schema declares numbers or flags holds anything else."""
        key = (name, None if columns is None else tuple(columns), where)
        if key not in self._tables:
            self._tables[key] = read_table(self.table_path(name), name, columns, where)
        return self._tables[key]

    def columns(self, name: str) -> List[str]:
        """The column names of one table, read from its header; BadInput naming the file
        when it is unreadable (truncated, empty)."""
        return table_columns(self.table_path(name))


def _parallelism(keys: Dict[str, Any], at: str) -> str:
    """" (DP16, EP16)" from a deployment's (or a pool's) layout keys under `at`; the degrees
    above 1 only, "" where none is."""
    parts = [(f"DP{v}" if k == "attention.dp" else f"EP{v}" if k == "moe.ep" else
              f"{k.partition('.')[0].replace('moe', 'MoE')} TP{v}")
             for k in ("attention.dp", "attention.tp", "moe.ep", "moe.tp", "dense.tp")
             if isinstance(v := keys.get(at + k), int) and v > 1]
    return f" ({', '.join(parts)})" if parts else ""


def flatten(values: dict, prefix: str = "") -> Dict[str, object]:
    """Nested mappings as one level of dotted keys; lists stay values."""
    out = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out
