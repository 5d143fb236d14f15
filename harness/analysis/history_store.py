"""The results history (docs/comparing.md, "History and change points"): a folder of
Parquet files, one per run added, and the marker that says `add` made the folder
(harness/analysis/history_place.py). Each file holds that run's summary in long format, one
row per (metric, stat), with the run's labels and the commit of the engine it measured.

Every file is written whole under a hidden temporary name and renamed into place
(fileio/atomic.py), and its name is the run's identity: two `add`s never write the
same file but for the same run (then either rename leaves the same rows), a run added again
is found by name and skipped, and a kill mid-add leaves only a hidden `.*.tmp` file,
which reading ignores.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fileio.atomic import atomic_open
from fileio.regular import not_regular

from ..errors import BadInput
from ..io.one_word import one_word
from ..record.run import Run
from . import history_place

# What tells one series of figures from another: the same workload (by its resolved
# values), measured the same way on the same device, and the runner class where the user
# names one (`--runner`). The host is a label, not part of it: CI runners get a new name
# per job, and a series keyed by it would never grow.
CONFIGURATION = ("workload", "workload_hash", "device", "modeled", "gil_mode", "runner")
# `backend`: the manifest's device backend (cpu, cuda, npu): which clock a measured run's
# figures were timed by (change_points.floor_class). The device decides it: not part of the
# configuration, so that a series from before the column goes on with new runs.
LABELS = (*CONFIGURATION, "backend", "host", "harness_version", "commit", "commit_date",
          "run_id")
SCHEMA = pa.schema([
    ("run_key", pa.string()), ("run_id", pa.string()), ("workload", pa.string()),
    ("workload_hash", pa.string()), ("device", pa.string()), ("backend", pa.string()),
    ("modeled", pa.bool_()),
    ("gil_mode", pa.string()), ("runner", pa.string()), ("host", pa.string()),
    ("harness_version", pa.string()), ("commit", pa.string()), ("commit_date", pa.string()),
    ("metric", pa.string()), ("stat", pa.string()), ("value", pa.float64()),
    ("unit", pa.string()),
])
# Columns a file written before they existed lacks, read as this value: `runner` (none
# named: the series of every host of the configuration, as new ones are), `backend` (not
# recorded: judged as the host's, change_points.floor_class).
ADDED_LATER = {"runner": "", "backend": ""}
RUNNER_VARIABLE = "STEPTRACE_RUNNER"  # `add --runner`'s default (docs/ci.md)
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
    ident = json.dumps([run.name, m.started, m.host, m.pid, m.workload_sha256,
                        m.trace_sha256, workload_hash(run.values)],
                       default=str)
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def workload_hash(values: dict) -> str:
    """The resolved workload's values (the manifest's), less NOT_THE_EXPERIMENT, hashed."""
    values = {k: v for k, v in values.items() if k not in NOT_THE_EXPERIMENT}
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def utc_date(text: str, where: str) -> str:
    """An ISO 8601 date or time as UTC ISO text (a time without a zone taken as UTC);
    BadInput naming `where` for anything else, a time whose UTC falls outside the years 1
    to 9999 included."""
    try:
        when = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"{where}: {text!r} is not an ISO 8601 date (2026-12-03 or "
                       f"2026-12-03T16:22:47+00:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    try:
        return when.astimezone(timezone.utc).isoformat(timespec="seconds")
    except OverflowError:  # 9999-12-31T23:59:59-23:59 is in the year 10000 in UTC
        raise BadInput(f"{where}: {text!r} is outside the dates accepted: in UTC, "
                       f"0001-01-01T00:00:00+00:00 to 9999-12-31T23:59:59+00:00") from None


def provenance(run: Run, commit: Optional[str], date: Optional[str]) -> Provenance:
    """--commit and --date, else the manifest's `git_sha` and `git_date` (the run's
    $STEPTRACE_COMMIT and $STEPTRACE_COMMIT_DATE, or the harness's own checkout, never for a
    run against an endpoint: harness/run/manifest.py); BadInput naming what neither gives."""
    source = "manifest (git_sha, git_date; set STEPTRACE_COMMIT and STEPTRACE_COMMIT_DATE " \
             "for the run)"
    if run.manifest.target is not None:
        source = ("manifest: a run against an endpoint records the engine's commit only from "
                  "STEPTRACE_COMMIT and STEPTRACE_COMMIT_DATE, set for the run (the engine is "
                  "the endpoint's, not steptrace's checkout)")
    return checked_provenance(run.path, commit, date, run.manifest.git_sha,
                              run.manifest.git_date, "engine's", source, "manifest's git_sha")


def checked_provenance(path, commit, date, found_commit, found_date, whose: str,
                       source: str, commit_key: str) -> Provenance:
    """The commit and its date (UTC): --commit and --date, else what the `source` gave
    (its commit as `commit_key`); BadInput naming which neither gave, the date that is not
    one or the commit that is not a name (empty, white space, a control character)."""
    missing = [what for what, given, found in (("commit (--commit)", commit, found_commit),
                                               ("commit date (--date)", date, found_date))
               if given is None and not found]
    if missing:
        raise BadInput(f"{path}: the {whose} {' and '.join(missing)}: neither given nor in "
                       f"its {source}")
    name = one_word(commit, "--commit") if commit is not None else \
        one_word(str(found_commit), f"{path}: the {commit_key}")
    if date is not None:
        return Provenance(name, utc_date(date, "--date"))
    return Provenance(name, utc_date(str(found_date), f"{path}: commit date"))


def runner(given: Optional[str]) -> str:
    """The runner class the series are kept apart by: --runner, else $STEPTRACE_RUNNER,
    else none (""); BadInput naming the option or variable where it is not a label (empty
    as --runner, white space, a control character)."""
    if given is not None:
        return one_word(given, "--runner")
    found = os.environ.get(RUNNER_VARIABLE, "")
    return one_word(found, f"${RUNNER_VARIABLE}") if found else ""


def rows(run: Run, prov: Provenance, runner: str = "") -> pa.Table:
    """The run's summary metrics (no NaN: nothing measured), one row per (metric, stat)."""
    labels = dict(run_key=run_key(run), run_id=run.name, workload=run.workload,
                  workload_hash=workload_hash(run.values), device=run.device,
                  backend=str((run.manifest.device or {}).get("backend", "")),
                  modeled=run.modeled, gil_mode=str(run.manifest.gil_mode),
                  runner=runner, host=str(run.manifest.host or ""),
                  harness_version=str((run.manifest.versions or {}).get("steptrace", "")),
                  commit=prov.commit, commit_date=prov.date)
    units = run.units()
    values = [(name, value) for name, value in run.metrics().items() if value == value]
    frame = pd.DataFrame(dict(
        labels, metric=[n.partition(".")[0] for n, _ in values],
        stat=[n.partition(".")[2] for n, _ in values],
        value=[v for _, v in values], unit=[units.get(n, "") for n, _ in values]),
        columns=SCHEMA.names)
    return pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False)


def add(store: Path, run: Run, prov: Provenance, runner: str = "") -> bool:
    """Store the run's rows; False (nothing written) where the store already holds it."""
    prepare(store, [run.path])
    return write(store, run_key(run), lambda: rows(run, prov, runner))


def prepare(store: Path, sources: Sequence[Path] = ()) -> None:
    """The store made, or found to be one `add` made and every file of it read whole
    (checked()), before anything is written to it; BadInput naming the path where it is
    not (history_place.check) or the file that is not what `add` wrote."""
    history_place.check(store, sources)
    if store.is_dir():
        checked(store)
    make(store)


def make(store: Path) -> None:
    """The store's folder and its marker, made where missing; BadInput where it cannot be
    one."""
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file there, or above it
        raise BadInput(f"{store}: cannot be a history store (a folder): {e.strerror}") from None
    history_place.mark(store)


def write(store: Path, key: str, table: Callable[[], pa.Table]) -> bool:
    """The rows `table()` makes stored as `key`'s file, written whole; False (nothing
    written, nothing made) where the store already holds `key`. Never through a symbolic
    link: one there is refused (BadInput), not followed."""
    path = store / f"{key}.parquet"
    history_place.refuse_link(path, store)
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
    """Every row of the store (checked()); BadInput where it holds none."""
    tables = checked(store)
    if not tables:
        raise BadInput(f"{store}: an empty history store: add runs with `steptrace history "
                       f"add RUN --store {store}`")
    return pa.concat_tables(tables).to_pandas()


def checked(store: Path) -> List[pa.Table]:
    """Every file of the store, read whole; BadInput naming a marker that is not one
    (history_place.check_marker), a file that is not one `add` wrote, and the file, column,
    row and value that is not of its column's type or is missing (a null label; a null
    value reads as NaN)."""
    history_place.check_marker(store)
    tables = []
    for path in files(store):
        history_place.refuse_link(path, store)
        why = not_regular(path)  # a FIFO would block the reader for ever
        if why:
            raise BadInput(f"{path}: {why}")
        try:
            table = pq.read_table(path)
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: unreadable ({e})") from None
        tables.append(_checked(path, table))
    return tables


def _checked(path: Path, table: pa.Table) -> pa.Table:
    """`table` as SCHEMA, ADDED_LATER's columns filled where missing; BadInput naming what
    is not."""
    names = table.column_names
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise BadInput(f"{path}: not a history file (column(s) {', '.join(twice)} twice)")
    missing = [c for c in SCHEMA.names if c not in names and c not in ADDED_LATER]
    if missing:
        raise BadInput(f"{path}: not a history file (no column(s) {', '.join(missing)})")
    columns = []
    for field in SCHEMA:
        if field.name not in names:
            columns.append(pa.array([ADDED_LATER[field.name]] * table.num_rows, field.type))
            continue
        column = table.column(field.name)
        try:
            column = column.cast(field.type)
        except pa.ArrowException:
            raise BadInput(_not_of_type(path, field, column)) from None
        if column.null_count and field.name != "value":
            row = column.to_pylist().index(None)
            raise BadInput(f"{path}: column {field.name}, row {row + 1} of {len(column)}: "
                           f"null, expected a {field.type} (every label is given)")
        check = _READ_AS.get(field.name)
        columns.append(_each_text(path, field.name, column, check) if check else column)
    return pa.table(columns, schema=SCHEMA)


def _not_of_type(path: Path, field: pa.Field, column) -> str:
    """The first value of `column` that is not a `field.type`, named with its row."""
    for row, value in enumerate(column.to_pylist()):
        try:
            pa.array([value]).cast(field.type)
        except pa.ArrowException:
            return (f"{path}: column {field.name}, row {row + 1} of {len(column)}: "
                    f"{value!r:.80} is not a {field.type}")
    return f"{path}: column {field.name} is {column.type}, expected {field.type}"


def _each_text(path: Path, name: str, column, check: Callable[[str, str], str]) -> pa.Array:
    """The column's texts as `check(text, where)` reads them, each distinct one once;
    BadInput naming the file, column, row and value of the first it refuses."""
    texts = column.to_pylist()
    read: dict = {}
    for row, text in enumerate(texts):
        if text not in read:
            read[text] = check(text, f"{path}: column {name}, row {row + 1} of {len(texts)}")
    return pa.array([read[text] for text in texts], pa.string())


# Labels read as `add` checks them: a commit as one word (no newline to break `show`'s
# table), its date as UTC text (so that the text's order is the dates').
_READ_AS = {"commit": one_word, "commit_date": utc_date}
