"""Result folders found and read back as runs (harness/record/run.py): a run folder, a
glob, a capacity search's folder (its run at capacity), a sweep's (its points' runs), or a
folder of runs; and the sweep's and the capacity search's tables they are found by.

Everything here reads files a run wrote and never imports the engine.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Union

import numpy as np
import pandas as pd

from ..errors import BadInput
from ..record.run import Run
from ..record.table_reader import is_null, kind_of, read_table, shown, table_file, where_in
from ..schema import TABLES
from ..schema.tables import SWEEP_STATUSES


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
    table = table_file(path, "capacity")
    if table is not None:  # a capacity search's folder (a FIFO in its table's place is named)
        return [at_capacity(table)]
    table = table_file(path, "sweep")
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
        if is_null(folder) or Path(str(folder)).is_absolute() or ".." in Path(str(folder)).parts:
            raise BadInput(f"{table_path}: folder {folder!r}: expected a point's folder "
                           f"relative to the sweep's (points/<point>)")
        out += _point_runs(table_path.parent / str(folder))
    return out


def read_sweep_table(path: Path, needed: Sequence[str]) -> pd.DataFrame:
    """A sweep's table (sweep.parquet), every column checked against its declaration in
    harness/schema (check_values; a status one of SWEEP_STATUSES). BadInput naming the file
    where it is not a regular file, is unreadable or lacks a `needed` column, and naming the
    column, row and value where one holds another kind."""
    # its integers are answers, null for a point not done (concurrency outside its
    # searches); pandas reads them as floats, the nulls as NaN
    frame = read_table(path, "sweep", nullable=[
        c.name for c in TABLES["sweep"].columns if kind_of(c.type) == "integer"])
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise BadInput(f"{path}: no column(s) {', '.join(missing)}: not a sweep table "
                       f"(docs/tables.md, sweep)")
    if "status" in frame.columns:
        bad = ~frame["status"].isin(SWEEP_STATUSES).to_numpy(bool)
        if bad.any():
            row = int(np.argmax(bad))
            raise BadInput(f"{path}: column status, {where_in(path, row)}: expected "
                           f"{', '.join(SWEEP_STATUSES[:-1])} or {SWEEP_STATUSES[-1]}, got "
                           f"{shown(frame['status'].iloc[row])}")
    return frame


def _point_runs(folder: Path) -> List[Path]:
    """A point's run: in capacity mode the run at capacity of the search in its folder."""
    searches = sorted({p.parent for p in folder.rglob("capacity.*")})
    tables = [t for t in (table_file(s, "capacity") for s in searches) if t]
    return [at_capacity(t) for t in tables] if tables else _runs_under(folder)


def at_capacity(table_path: Path) -> Path:
    """The run folder a capacity search's folder stands for, from its capacity table: the
    probe at capacity, the highest rate that met the SLO target (docs/capacity.md).
    BadInput when no probe met it, or the table is unreadable."""
    table = read_table(table_path, "capacity", ["run_id", "at_capacity"])
    search = table_path.parent
    rows = np.flatnonzero(table["at_capacity"].to_numpy(bool))
    if not len(rows):
        raise BadInput(f"{search}: a capacity search in which no rate met the SLO target: no "
                       f"run at capacity; name a probe's run folder instead")
    run_id = table["run_id"].iloc[rows[0]]
    if is_null(run_id):
        raise BadInput(f"{table_path}: run_id, {where_in(table_path, rows[0])} (the probe at "
                       f"capacity): expected a probe's folder name, got no value (null)")
    run_id = str(run_id)
    if run_id in ("", ".", "..") or Path(run_id).name != run_id:  # a probe is a child
        raise BadInput(f"{table_path}: run_id {run_id!r}: expected a probe's folder name "
                       f"(one path component), not a path")
    return search / run_id


def load_runs(specs: Iterable[str]) -> List[Run]:
    """Run.read over find_runs(specs)."""
    return [Run.read(path) for path in find_runs(specs)]
