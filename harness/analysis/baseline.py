"""A stored baseline: a folder of trimmed run folders (results/baselines/<name>/), what
`steptrace gate` reads as BASELINE and `steptrace gate --update` writes.

A trimmed run keeps its manifest and summary and, for a modeled run, the steps, batches
and requests tables without the columns that time the host: what the gate compares, a
few hundred KB for a small workload. The folder store() makes is marked by baseline.json
(what it is, the command, the date and its runs), and --update replaces only a folder
as store() left it: its marker, the run folders the marker lists and in each only the
files store() writes. Anything else at that path is left alone (check_destination). The
folder is replaced whole or not at all.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, List, Sequence, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from fileio.atomic import WriteFailed
from fileio.json_file import read_json

from ..errors import BadInput
from ..io.interrupt import Stop, signals_stop
from ..record.run import Run
from ..schema.manifest import view
from .destination import BASELINE_MARKER, check_place, contents, listed, name, them
from .exact import TABLES, compared_columns

MARKER = BASELINE_MARKER
KIND = "steptrace gate baseline"  # the marker's "kind": a baseline, not just a results folder


class Interrupted(Exception):
    """SIGINT or SIGTERM during store(): the baseline is whole, the previous one or, when
    `replaced`, the new one."""

    def __init__(self, signum: int, replaced: bool) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.replaced = signum, replaced


def check_destination(dest: Path, runs: Sequence[Run]) -> None:
    """BadInput unless store(runs, dest) may write `dest`: a new place (harness/analysis/
    destination.py), or a baseline as store() left it (its marker, the run folders it
    lists, in each the files of a trimmed run, nothing else)."""
    dest = Path(dest)
    if check_place(dest, [run.path for run in runs], role="the candidate run {}",
                   writes="--update writes a baseline",
                   own="a baseline is a folder of its own (results/baselines/NAME)"):
        return  # a new baseline: nothing there to lose
    marker = dest / MARKER
    if not os.path.lexists(marker):
        raise BadInput(f"{dest} is not a baseline: it holds {contents(dest)} and no {MARKER}; "
                       f"--update replaces only a baseline it made or creates a new one")
    stored, why = _marker(marker)
    if why:
        raise BadInput(f"{marker}: not a baseline's marker: {why}; --update replaces only a "
                       f"baseline it made")
    entries = [p for p in sorted(dest.iterdir()) if p.name != MARKER]
    extra = [p for p in entries if p.is_symlink() or not p.is_dir()]
    if extra:
        raise BadInput(f"{dest}: a baseline, but it also holds {listed([name(p) for p in extra])}"
                       f", which --update would delete: move {them(extra)} out first")
    unlisted = [p for p in entries if p.name not in stored]
    if unlisted:
        raise BadInput(f"{dest} holds {listed([p.name for p in unlisted])}, which its {MARKER} "
                       f"does not list: --update would delete {them(unlisted)}; move "
                       f"{them(unlisted)} out first")
    absent = [run for run in stored if run not in {p.name for p in entries}]
    if absent:
        raise BadInput(f"{marker} lists {listed(absent)}, which {dest} does not hold: not the "
                       f"baseline --update stored; --update replaces only a baseline as it "
                       f"left it")
    for run in entries:
        _check_trimmed(run)


def _check_trimmed(run: Path) -> None:
    """BadInput unless `run` holds what store() writes for a run of its manifest, in
    regular files, and nothing else."""
    manifest, why = read_json(run / "manifest.json")
    if not why and not isinstance(manifest, dict):
        why = f"a JSON {type(manifest).__name__}"
    if why:
        raise BadInput(f"{run / 'manifest.json'}: {why}: not a run --update stored; --update "
                       f"replaces only a baseline as it left it")
    assert isinstance(manifest, dict)  # else `why` says so
    kept = {"manifest.json", *(f"{t}.parquet" for t in _tables(bool(view(manifest).modeled)))}
    extra = [p for p in sorted(run.iterdir())
             if p.name not in kept or p.is_symlink() or not p.is_file()]
    if extra:
        raise BadInput(f"{run} holds {listed([name(p) for p in extra])}, which --update would "
                       f"delete: move {them(extra)} out first")


def store(runs: Sequence[Run], dest: Path, command: str) -> List[Path]:
    """Replace the baseline at `dest` (check_destination) with trimmed copies of `runs`,
    complete runs of one workload (gate.check_complete, gate.check_comparable), and its
    marker naming `command`; the run folders written. WriteFailed naming `dest` for an OS
    error (a full disk); Interrupted for SIGINT or SIGTERM. On any failure the previous
    baseline stays as it was and no temporary folder is left behind."""
    given, dest = dest, Path(os.path.abspath(dest))
    tmp = dest.parent / f".{dest.name}.{secrets.token_hex(4)}.tmp"
    stop, replaced = Stop(), False
    with signals_stop(stop):  # a signal waits for the file being written, then stops store
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            for name, write in _files(runs, command):
                if stop.is_set():
                    break
                _write_whole(tmp / name, write)
            if not stop.is_set():
                _swap(tmp, dest)
                replaced = True
        except OSError as e:
            raise WriteFailed(given, _reason(e)) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if stop.signum is not None:
        raise Interrupted(stop.signum, replaced)
    return [Path(given) / run.name for run in runs]


def _files(runs: Sequence[Run], command: str) -> Iterator[Tuple[str, Callable]]:
    """(path in the baseline, write(file)) for each file of the baseline, the marker last."""
    for run in runs:
        yield f"{run.name}/manifest.json", \
            lambda f, run=run: f.write((run.path / "manifest.json").read_bytes())
        for table in _tables(run.modeled):
            yield f"{run.name}/{table}.parquet", \
                lambda f, run=run, table=table: _write_trimmed(run, table, f)
    marker = dict(kind=KIND, command=command,
                  stored=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  runs=[run.name for run in runs])
    yield MARKER, lambda f: f.write((json.dumps(marker, indent=1) + "\n").encode())


def _tables(modeled: bool) -> Tuple[str, ...]:
    """The tables of a trimmed run, each NAME.parquet beside its manifest.json."""
    return ("summary", *(TABLES if modeled else ()))


def _write_trimmed(run: Run, name: str, file) -> None:
    columns = None if name == "summary" else compared_columns(run, name)
    table = pa.Table.from_pandas(run.table(name, columns), preserve_index=False)
    pq.write_table(table, file, compression="zstd")


def _write_whole(path: Path, write: Callable) -> None:
    """On disk before the folder is renamed into place: a full disk that only the fsync
    reports fails the store, not a later read."""
    path.parent.mkdir(exist_ok=True)
    with open(path, "xb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())


def _swap(new: Path, dest: Path) -> None:
    """`new` under dest's name, what was there removed. Called with signals held: between
    the two renames `dest` is absent, and only a SIGKILL or the machine going down there
    (microseconds) leaves the previous baseline under its hidden .old name."""
    if not dest.exists() or not any(dest.iterdir()):
        os.replace(new, dest)  # onto nothing or an empty folder: one rename
        return
    old = dest.parent / f".{dest.name}.{secrets.token_hex(4)}.old"
    os.replace(dest, old)
    try:
        os.replace(new, dest)
    except OSError:
        os.replace(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)  # the new baseline is in place either way


def _reason(e: OSError) -> OSError:
    """The OS's words for the error: pyarrow wraps them ("Error writing bytes to file.
    Detail: [errno 28] No space left on device")."""
    return OSError(e.errno, os.strerror(e.errno)) if e.errno else e


def _marker(marker: Path) -> Tuple[List[str], str]:
    """(the runs the marker lists, "") or ([], what the file is instead)."""
    if marker.is_symlink():
        return [], "a symbolic link"
    data, why = read_json(marker)
    if why:
        return [], why
    if not isinstance(data, dict) or data.get("kind") != KIND:
        found = data.get("kind") if isinstance(data, dict) else type(data).__name__
        return [], f"expected \"kind\": {json.dumps(KIND)}, got {found!r}"
    runs = data.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        return [], f"\"runs\": expected a list of run folder names, got {runs!r}"
    return runs, ""
