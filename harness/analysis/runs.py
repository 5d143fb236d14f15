"""Result folders read back as runs (run folders, globs, or folders of runs): the
manifest, the run's state, its labels and workload keys, and its summary metrics; tables on
demand, only the columns asked for, each checked against its declared kind.

Everything here reads files a run wrote and never imports the engine. A run's summary and
state are what `steptrace show` reads (harness/record/run_folder.py), so the two never
disagree.
"""

from __future__ import annotations

import glob
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fileio.regular import not_regular

from ..errors import BadInput
from ..record import run_folder
from ..record.busy_host import busy_host
from ..record.device_label import device_name
from ..schema import TABLES
from ..schema.tables import SWEEP_STATUSES

# Summary rows that count things or restate the workload: not metrics to compare.
NOT_METRICS = frozenset({"requests", "steps", "slo", "window", "tokens"})
POOLS = ("prefill", "decode")  # a P/D deployment's, in the order "xPyD" names them


@dataclass(frozen=True)
class Run:
    """One run folder. `summary` holds its summary rows (metric, stat, value, unit): the
    run's summary table, or for a run that did not finish, what its steps table says."""

    path: Path
    manifest: dict = field(repr=False)
    state: str
    summary: pd.DataFrame = field(repr=False)
    notes: tuple = ()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    @property
    def condition(self) -> str:
        """The state, a failed run's error with it: `failed (RuntimeError: ...)`."""
        error = self.manifest.get("error") if self.state == "failed" else None
        return f"{self.state} ({error})" if error else self.state

    @property
    def workload(self) -> str:
        """The workload's `name`."""
        return str(self.manifest.get("values", {}).get("name", ""))

    @property
    def trace_sha256(self) -> str:
        return str(self.manifest.get("trace_sha256", ""))

    @property
    def modeled(self) -> bool:
        return bool(self.manifest.get("modeled"))

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
        return dict(run_id=self.name, gil_mode=self.manifest["gil_mode"],
                    overlap=self.keys.get("engine.overlap"), device=self.device,
                    repeat=self.manifest.get("repeat"))

    @property
    def keys(self) -> Dict[str, Any]:
        """The resolved workload keys, flattened: {"engine.overlap": True, "model":
        "tiny", ...} (the manifest's JSON values)."""
        return flatten(self.manifest.get("values", {}))

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
        """The table's file; BadInput for one that is not a regular file (_check_regular)."""
        path = run_folder.table_file(self.path, name)
        if path is None:
            raise BadInput(f"{self.path}: no {name} table ({name}.parquet or {name}.csv)")
        _check_regular(path)
        return path

    def table(self, name: str, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
        """One table of the run, only `columns` read (all when None). BadInput naming the
        file when the table or a column is missing or unreadable, or a column the schema
        declares numbers or flags holds anything else (check_values)."""
        path = self.table_path(name)
        cols = None if columns is None else list(columns)
        try:
            if path.suffix == ".parquet":
                present = pq.read_schema(path).names
                missing = [c for c in cols or () if c not in present]
                if missing:
                    raise BadInput(f"{path}: no column(s) {', '.join(missing)}")
                frame = pq.read_table(path, columns=cols).to_pandas()
            else:
                frame = pd.read_csv(path, usecols=cols)
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: unreadable ({e})") from None
        check_values(path, name, frame)
        return frame

    def columns(self, name: str) -> List[str]:
        """The column names of one table, read from its header; BadInput naming the file
        when it is unreadable (truncated, empty)."""
        path = self.table_path(name)
        try:
            if path.suffix == ".parquet":
                return list(pq.read_schema(path).names)
            return list(pd.read_csv(path, nrows=0).columns)
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: unreadable ({e})") from None


def _parallelism(keys: Dict[str, Any], at: str) -> str:
    """" (DP16, EP16)" from a deployment's (or a pool's) layout keys under `at`; the degrees
    above 1 only, "" where none is."""
    parts = [(f"DP{v}" if k == "attention.dp" else f"EP{v}" if k == "moe.ep" else
              f"{k.partition('.')[0].replace('moe', 'MoE')} TP{v}")
             for k in ("attention.dp", "attention.tp", "moe.ep", "moe.tp", "dense.tp")
             if isinstance(v := keys.get(at + k), int) and v > 1]
    return f" ({', '.join(parts)})" if parts else ""


def check_values(path: Path, table: str, frame: pd.DataFrame,
                 nullable: Collection[str] = ()) -> None:
    """BadInput naming the file, the column, the row and the value where a column that
    harness/schema declares integers, numbers or flags holds anything else: text, a null
    flag, a fraction or NaN among integers (but in the `nullable` columns); or where a
    Parquet file's text column holds anything but text or nulls (a CSV's holds what pandas
    made of its cells). Where the dtype does not fit, the values decide: integers stored as
    floats pass, and so does a CSV's empty column (read as text)."""
    declared = {c.name: c.type for c in TABLES[table].columns} if table in TABLES else {}
    for name, kind in ((n, _kind(declared[n])) for n in frame.columns if n in declared):
        column = frame[name]
        if kind is None or column.dtype.kind in _FITS[kind] or (
                kind == "text" and (path.suffix != ".parquet" or _all_text(column))):
            continue
        bad = np.array([not (_fits(v, kind) or (name in nullable and _is_null(v)))
                        for v in column.to_numpy(object)], bool)
        if not bad.any():  # integers stored as floats, a CSV's empty column read as text
            continue
        row = int(np.argmax(bad))
        raise BadInput(f"{path}: column {name}, {_where(path, row)}: expected "
                       f"{_EXPECTED[kind]}, got {_shown(column.iloc[row])}")


def _kind(type_: pa.DataType) -> Optional[str]:
    if pa.types.is_boolean(type_):
        return "flag"
    if pa.types.is_integer(type_):
        return "integer"
    if pa.types.is_floating(type_):
        return "number"
    return "text" if pa.types.is_string(type_) or pa.types.is_dictionary(type_) else None


# the dtype kinds that hold a declared kind whatever their values (text's: none, its object
# dtype holds anything); others are read value by value
_FITS = {"flag": "b", "integer": "iu", "number": "iuf", "text": ""}
_EXPECTED = {"flag": "true or false", "integer": "an integer", "number": "a number",
             "text": "text"}


def _all_text(column: pd.Series) -> bool:
    """Text or nulls only, told without a look at each value (a coded column's by its
    codes' names)."""
    values = column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) \
        else column
    return pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty")


def _shown(value) -> str:
    return "no value (null)" if _is_null(value) else repr(
        value.item() if isinstance(value, np.generic) else value)


def _fits(value, kind: str) -> bool:
    if kind == "text":
        return isinstance(value, str) or _is_null(value)
    if isinstance(value, (bool, np.bool_)):
        return kind == "flag"
    if isinstance(value, (int, np.integer)):
        return kind != "flag"
    if isinstance(value, (float, np.floating)):
        return kind == "number" or (kind == "integer" and float(value).is_integer())
    return False


def _where(path: Path, row: int) -> str:
    """A row as a trace error names it: a CSV's line (the header is line 1), a Parquet
    file's row from 1."""
    return f"line {row + 2}" if path.suffix == ".csv" else f"row {row + 1}"


def _is_null(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


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


def read_run(path: Path) -> Run:
    """One run folder; BadInput when it is not one."""
    path = Path(path)
    result = run_folder.read(path)  # checks the manifest and reads the summary as show does
    manifest = json.loads((path / "manifest.json").read_text())
    summary = pd.DataFrame(result["summary"], columns=["metric", "stat", "value", "unit"])
    return Run(path, manifest, result["state"], summary, tuple(result["notes"]))


def find_runs(specs: Iterable[Union[str, Path]]) -> List[Path]:
    """Run folders named by `specs`: a run folder, a glob, a capacity search's folder (its
    run at capacity), a `steptrace sweep`'s folder (its points' runs, each at capacity in
    capacity mode), or a folder holding run folders at any depth (results/, a sweep's
    points/ folder: every run, a capacity search's every probe). In the order given, sorted
    within each spec, each once. BadInput for a spec that names no run."""
    out: Dict[Path, None] = {}
    for spec in specs:
        spec = str(spec)
        literal = not glob.has_magic(spec) or Path(spec).exists()  # a folder named [x]
        matches = [spec] if literal else sorted(glob.glob(spec))
        found = [run for match in matches for run in _runs_under(Path(match))]
        if not found:
            what = "matches nothing" if not matches else "holds no run folder (no manifest.json)"
            raise BadInput(f"{spec}: {what}")
        out.update(dict.fromkeys(found))
    return list(out)


def _runs_under(path: Path) -> List[Path]:
    """A run folder; a capacity search's folder stands for its run at capacity, a `steptrace
    sweep`'s for its points' runs (sweep_runs); any other folder for every run under it."""
    if (path / "manifest.json").is_file():
        return [path]
    if not path.is_dir():
        return []
    table = run_folder.table_file(path, "capacity")
    if table is not None:  # a capacity search's folder (a FIFO in its table's place is named)
        return [at_capacity(table)]
    table = run_folder.table_file(path, "sweep")
    if table is not None:
        return sweep_runs(table)
    return sorted(p.parent for p in path.rglob("manifest.json"))


def sweep_runs(table_path: Path) -> List[Path]:
    """The runs a sweep's table answers from, in its order: each done point's run (in
    capacity mode its run at capacity), found in the point's folder; a point with no answer
    (a capacity search in which no rate met the target) has none."""
    table = read_sweep_table(table_path, ["status", "folder", "output_tokens_per_s"])
    answered = (table["status"] == "done") & table["output_tokens_per_s"].notna()
    out = []
    for folder in table["folder"][answered]:
        if _is_null(folder) or Path(str(folder)).is_absolute() or ".." in Path(str(folder)).parts:
            raise BadInput(f"{table_path}: folder {folder!r}: expected a point's folder "
                           f"relative to the sweep's (points/<point>)")
        out += _point_runs(table_path.parent / str(folder))
    return out


def read_sweep_table(path: Path, needed: Sequence[str]) -> pd.DataFrame:
    """A sweep's table (sweep.parquet), every column checked against its declaration in
    harness/schema (check_values; a status one of SWEEP_STATUSES). BadInput naming the file
    where it is not a regular file, is unreadable or lacks a `needed` column, and naming the
    column, row and value where one holds another kind."""
    _check_regular(path)
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e})") from None
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise BadInput(f"{path}: no column(s) {', '.join(missing)}: not a sweep table "
                       f"(docs/tables.md, sweep)")
    # its integers are answers, null for a point not done (concurrency outside its
    # searches); pandas reads them as floats, the nulls as NaN
    check_values(path, "sweep", frame, nullable=[
        c.name for c in TABLES["sweep"].columns if _kind(c.type) == "integer"])
    if "status" in frame.columns:
        bad = ~frame["status"].isin(SWEEP_STATUSES).to_numpy(bool)
        if bad.any():
            row = int(np.argmax(bad))
            raise BadInput(f"{path}: column status, {_where(path, row)}: expected "
                           f"{', '.join(SWEEP_STATUSES[:-1])} or {SWEEP_STATUSES[-1]}, got "
                           f"{_shown(frame['status'].iloc[row])}")
    return frame


def _check_regular(path: Path) -> None:
    """BadInput naming what the path is where it is not a readable regular file: pyarrow
    would wait in open() on a FIFO for a writer, past SIGINT and SIGTERM."""
    why = not_regular(path)
    if why:
        raise BadInput(f"{path}: {why}")


def _point_runs(folder: Path) -> List[Path]:
    """A point's run: in capacity mode the run at capacity of the search in its folder."""
    searches = sorted({p.parent for p in folder.rglob("capacity.*")})
    tables = [t for t in (run_folder.table_file(s, "capacity") for s in searches) if t]
    return [at_capacity(t) for t in tables] if tables else _runs_under(folder)


def at_capacity(table_path: Path) -> Path:
    """The run folder a capacity search's folder stands for, from its capacity table: the
    probe at capacity, the highest rate that met the SLO target (docs/capacity.md).
    BadInput when no probe met it, or the table is unreadable."""
    columns = ["run_id", "at_capacity"]
    _check_regular(table_path)
    try:
        table = pd.read_parquet(table_path, columns=columns) \
            if table_path.suffix == ".parquet" else pd.read_csv(table_path, usecols=columns)
    except (OSError, ValueError) as e:
        raise BadInput(f"{table_path}: unreadable ({e})") from None
    check_values(table_path, "capacity", table)
    search = table_path.parent
    rows = np.flatnonzero(table["at_capacity"].to_numpy(bool))
    if not len(rows):
        raise BadInput(f"{search}: a capacity search in which no rate met the SLO target: no "
                       f"run at capacity; name a probe's run folder instead")
    run_id = table["run_id"].iloc[rows[0]]
    if _is_null(run_id):
        raise BadInput(f"{table_path}: run_id, {_where(table_path, rows[0])} (the probe at "
                       f"capacity): expected a probe's folder name, got no value (null)")
    run_id = str(run_id)
    if run_id in ("", ".", "..") or Path(run_id).name != run_id:  # a probe is a child
        raise BadInput(f"{table_path}: run_id {run_id!r}: expected a probe's folder name "
                       f"(one path component), not a path")
    return search / run_id


def load_runs(specs: Iterable[str]) -> List[Run]:
    """read_run over find_runs(specs)."""
    return [read_run(path) for path in find_runs(specs)]
