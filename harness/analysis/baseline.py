"""A stored baseline: a folder of trimmed run folders (results/baselines/<name>/), what
`steptrace gate` reads as BASELINE and `steptrace gate --update` writes.

A trimmed run keeps its manifest and summary and, for a modeled run, the steps, batches
and requests tables without the columns that time the host: what the gate compares, a
few hundred KB for a small workload. The folder store() makes is marked by baseline.json
(what it is, the command and the date), and --update replaces only a folder so marked:
anything else at that path is left alone (check_destination). The folder is replaced whole
or not at all.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from ..atomic import WriteFailed
from ..commands.common import BadInput
from ..interrupt import Stop, signals_stop
from .exact import TABLES, compared_columns
from .runs import Run

MARKER = "baseline.json"
KIND = "steptrace gate baseline"  # the marker's "kind": a baseline, not just a results folder


class Interrupted(Exception):
    """SIGINT or SIGTERM during store(): the baseline is whole, the previous one or, when
    `replaced`, the new one."""

    def __init__(self, signum: int, replaced: bool) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.replaced = signum, replaced


def check_destination(dest: Path, runs: Sequence[Run]) -> None:
    """BadInput unless store(runs, dest) may write `dest`: a path that does not exist, an
    empty folder, or a baseline store() made (its marker and run folders, nothing else).
    Never a symbolic link, a file, nor a folder that is, holds or lies inside one of
    `runs`, another run folder or another baseline."""
    dest = Path(dest)
    try:
        _check_destination(dest, runs)
    except OSError as e:  # a folder it may not read
        raise BadInput(f"{dest}: cannot be inspected ({e.strerror or e})") from None


def _check_destination(dest: Path, runs: Sequence[Run]) -> None:
    if dest.is_symlink():
        raise BadInput(f"{dest}: a symbolic link (to {os.readlink(dest)}): --update writes a "
                       f"baseline folder, not through a link; name the folder itself")
    real = Path(os.path.realpath(dest))
    for run in runs:
        source = Path(os.path.realpath(run.path))
        where = "is" if real == source else "lies inside" if real.is_relative_to(source) \
            else "holds" if source.is_relative_to(real) else None
        if where:
            raise BadInput(f"{dest}: {where} the candidate run {run.path}: a baseline is stored "
                           f"apart from the runs it is made from (results/baselines/NAME)")
    for parent in dest.absolute().parents:  # where `gate` and `compare` would find it
        kind = "run folder" if (parent / "manifest.json").is_file() else \
            "baseline" if (parent / MARKER).is_file() else None
        if kind:
            raise BadInput(f"{dest}: lies inside the {kind} {parent}: a baseline is a folder "
                           f"of its own (results/baselines/NAME)")
    existing = next(p for p in (dest, *dest.absolute().parents) if os.path.lexists(p))
    if not existing.is_dir():
        what = "a file" if existing == dest else f"inside {existing}, a file"
        raise BadInput(f"{dest}: {what}, not a folder: --update writes a baseline folder")
    if existing != dest or not any(dest.iterdir()):
        return  # a new baseline: nothing there to lose
    marker = dest / MARKER
    if not os.path.lexists(marker):
        raise BadInput(f"{dest} is not a baseline: it holds {_contents(dest)} and no {MARKER}; "
                       f"--update replaces only a baseline it made or creates a new one")
    why = _not_a_marker(marker)
    if why:
        raise BadInput(f"{marker}: not a baseline's marker ({why}); --update replaces only a "
                       f"baseline it made")
    extra = [p for p in sorted(dest.iterdir()) if p.name != MARKER and not _is_run_folder(p)]
    if extra:
        raise BadInput(f"{dest}: a baseline, but it also holds {_names(extra)}, which --update "
                       f"would delete: move {'it' if len(extra) == 1 else 'them'} out first")


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
        for table in ("summary", *(TABLES if run.modeled else ())):
            yield f"{run.name}/{table}.parquet", \
                lambda f, run=run, table=table: _write_trimmed(run, table, f)
    marker = dict(kind=KIND, command=command,
                  stored=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  runs=[run.name for run in runs])
    yield MARKER, lambda f: f.write((json.dumps(marker, indent=1) + "\n").encode())


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


def _not_a_marker(marker: Path) -> Optional[str]:
    if marker.is_symlink() or not marker.is_file():
        return "a symbolic link" if marker.is_symlink() else "not a file"
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable: {e}"
    if not isinstance(data, dict) or data.get("kind") != KIND:
        found = data.get("kind") if isinstance(data, dict) else type(data).__name__
        return f"expected \"kind\": {json.dumps(KIND)}, got {found!r}"
    return None


def _is_run_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and (path / "manifest.json").is_file()


def _contents(folder: Path) -> str:
    """'12 run folders, sweeps/ (3 runs) and README.md': what --update would delete."""
    if (folder / "manifest.json").is_file():
        return "a run's manifest.json (it is a run folder)"
    entries = sorted(folder.iterdir())
    runs = [p for p in entries if _is_run_folder(p)]
    parts = [f"{len(runs)} run folder{'s' if len(runs) != 1 else ''}"] if runs else []
    return _names([p for p in entries if p not in runs], parts)


def _names(paths: Sequence[Path], parts: Sequence[str] = (), most: int = 6) -> str:
    parts = list(parts)
    for path in paths[:most]:
        if path.is_symlink() or not path.is_dir():
            parts.append(path.name)
            continue
        inside = sum(1 for _ in path.rglob("manifest.json"))
        parts.append(f"{path.name}/" + (f" ({inside} run{'s' if inside != 1 else ''})"
                                         if inside else ""))
    if len(paths) > most:
        parts.append(f"{len(paths) - most} more")
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
