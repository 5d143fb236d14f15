"""The results history (docs/comparing.md, "History and change points"): a folder of
Parquet files, one per run added, each holding that run's summary in long format, one row
per (metric, stat), with the run's labels and the commit of the engine it measured.

Every file is written whole under a hidden temporary name and renamed into place
(harness/io/atomic.py), and its name is the run's identity: two `add`s never write the
same file but for the same run (then either rename leaves the same rows), a run added again
is found by name and skipped, and a kill mid-add leaves only a hidden `.*.tmp` file,
which reading ignores.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, List, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.files import not_regular

from ..errors import BadInput
from ..io.atomic import atomic_open
from .runs import Run

# What tells one series of figures from another: the same workload (by its resolved
# values), measured the same way on the same machine.
CONFIGURATION = ("workload", "workload_hash", "device", "modeled", "gil_mode", "host")
LABELS = (*CONFIGURATION, "harness_version", "commit", "commit_date", "run_id")
SCHEMA = pa.schema([
    ("run_key", pa.string()), ("run_id", pa.string()), ("workload", pa.string()),
    ("workload_hash", pa.string()), ("device", pa.string()), ("modeled", pa.bool_()),
    ("gil_mode", pa.string()), ("host", pa.string()), ("harness_version", pa.string()),
    ("commit", pa.string()), ("commit_date", pa.string()), ("metric", pa.string()),
    ("stat", pa.string()), ("value", pa.float64()), ("unit", pa.string()),
])
# Workload keys that say where and how the figures are written, not what ran.
NOT_THE_EXPERIMENT = ("output", "table_format")


@dataclass(frozen=True)
class Provenance:
    """The engine under test: its git commit and that commit's date (UTC, ISO 8601)."""

    commit: str
    date: str


def run_key(run: Run) -> str:
    """The run's identity: its folder's name, what its manifest says of when, where and by
    which process it started, and what it ran (two runs of one process in one second
    differ by their settings, `--set` overrides included)."""
    m = run.manifest
    ident = json.dumps([run.name, m.get("started"), m.get("host"), m.get("pid"),
                        m.get("workload_sha256"), m.get("trace_sha256"), workload_hash(m)],
                       default=str)
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def workload_hash(manifest: dict) -> str:
    """The resolved workload's values (the manifest's), less NOT_THE_EXPERIMENT, hashed."""
    values = {k: v for k, v in (manifest.get("values") or {}).items()
              if k not in NOT_THE_EXPERIMENT}
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def utc_date(text: str, where: str) -> str:
    """An ISO 8601 date or time as UTC ISO text (a time without a zone taken as UTC);
    BadInput naming `where` for anything else."""
    try:
        when = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"{where}: {text!r} is not an ISO 8601 date (2026-12-03 or "
                       f"2026-12-03T16:22:47+00:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")


def provenance(run: Run, commit: Optional[str], date: Optional[str]) -> Provenance:
    """--commit and --date, else the manifest's `git_sha` and `git_date`; BadInput naming
    what neither gives."""
    return checked_provenance(run.path, commit or run.manifest.get("git_sha"),
                              date or run.manifest.get("git_date"), "engine's",
                              "manifest (git_sha, git_date)")


def checked_provenance(path, commit, date, whose: str, source: str) -> Provenance:
    """The commit and its date (UTC); BadInput naming which neither --commit/--date nor the
    `source` gave."""
    missing = [what for what, value in (("commit (--commit)", commit),
                                        ("commit date (--date)", date)) if not value]
    if missing:
        raise BadInput(f"{path}: the {whose} {' and '.join(missing)}: neither given nor in "
                       f"its {source}")
    return Provenance(str(commit), utc_date(str(date), f"{path}: commit date"))


def rows(run: Run, prov: Provenance) -> pa.Table:
    """The run's summary metrics (no NaN: nothing measured), one row per (metric, stat)."""
    labels = dict(run_key=run_key(run), run_id=run.name, workload=run.workload,
                  workload_hash=workload_hash(run.manifest), device=run.device,
                  modeled=run.modeled, gil_mode=str(run.manifest["gil_mode"]),
                  host=str(run.manifest.get("host", "")),
                  harness_version=str((run.manifest.get("versions") or {}).get("steptrace", "")),
                  commit=prov.commit, commit_date=prov.date)
    units = run.units()
    values = [(name, value) for name, value in run.metrics().items() if value == value]
    frame = pd.DataFrame(dict(
        labels, metric=[n.partition(".")[0] for n, _ in values],
        stat=[n.partition(".")[2] for n, _ in values],
        value=[v for _, v in values], unit=[units.get(n, "") for n, _ in values]),
        columns=SCHEMA.names)
    return pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False)


def add(store: Path, run: Run, prov: Provenance) -> bool:
    """Store the run's rows; False (nothing written) where the store already holds it."""
    make(store)
    return write(store, run_key(run), lambda: rows(run, prov))


def make(store: Path) -> None:
    """The store's folder, made where missing; BadInput where it cannot be one."""
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file there, or above it
        raise BadInput(f"{store}: cannot be a history store (a folder): {e.strerror}") from None


def write(store: Path, key: str, table: Callable[[], pa.Table]) -> bool:
    """The rows `table()` makes stored as `key`'s file, written whole; False (nothing
    written, nothing made) where the store already holds `key`."""
    path = store / f"{key}.parquet"
    if path.exists():
        return False
    with atomic_open(path, "wb") as f:
        pq.write_table(table(), f)
    return True


def files(store: Path) -> List[Path]:
    """The store's run files: a hidden name is a write in progress or one killed."""
    if not store.is_dir():
        raise BadInput(f"{store}: no history store there (a folder `history add` writes)")
    return sorted(p for p in store.glob("*.parquet") if not p.name.startswith("."))


def read(store: Path) -> pd.DataFrame:
    """Every row of the store; BadInput naming a file that is not one `add` wrote."""
    tables = []
    for path in files(store):
        why = not_regular(path)  # a FIFO would block the reader for ever
        if why:
            raise BadInput(f"{path}: {why}")
        try:
            table = pq.read_table(path)
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: unreadable ({e})") from None
        missing = [c for c in SCHEMA.names if c not in table.column_names]
        if missing:
            raise BadInput(f"{path}: not a history file (no column(s) {', '.join(missing)})")
        tables.append(table.select(SCHEMA.names).cast(SCHEMA))
    if not tables:
        raise BadInput(f"{store}: an empty history store: add runs with `steptrace history "
                       f"add RUN --store {store}`")
    return pa.concat_tables(tables).to_pandas()
