"""A point's completion: `point.json`, its row, written atomically as the last thing the
point does. A folder without it (a point killed or failed part way) is not complete: it is
removed and the point runs again. Nor is one whose `point.json` is not a done point's row
of the sweep table's types (edited, or written by something else): problem() says why, and
the point runs again as well."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Optional, Tuple

import numpy as np
import pyarrow as pa

from fileio.atomic import atomic_open
from fileio.own_folder import not_a_folder
from fileio.regular import not_regular

from .answer import ANSWER
from .owner import LinkRefused, NotAFolder, link_refusal

MARKER = "point.json"
INT64 = (-2**63, 2**63 - 1)  # the integers the table holds
_KINDS = {"string": "text", "double": "a number", "int64": "an integer"}


def read(folder: Path) -> Optional[dict]:
    """The completed point's row; None where the folder holds no complete point."""
    return _read(folder)[0]


def problem(folder: Path) -> Optional[str]:
    """Why the folder's `point.json` is not a complete point's row; None where there is
    none, or it is one."""
    return _read(folder)[1]


def _read(folder: Path) -> Tuple[Optional[dict], Optional[str]]:
    path = folder / MARKER
    if not (path.exists() or path.is_symlink()):
        return None, None
    why = not_regular(path)  # a FIFO in its place would block the reader
    if why is None:
        try:
            row = json.loads(path.read_text())
        except RecursionError:
            why = "JSON nested too deeply"
        except (OSError, ValueError) as e:
            why = f"not JSON ({e})"
        else:
            why = _not_a_row(row)
            if why is None:
                return row, None
    return None, f"{path}: {why}"


def _not_a_row(row: Any) -> Optional[str]:
    """Why `row` is not a done point's row: each of the answer's columns (and `reason`) a
    value of the sweep table's type for it, or null."""
    from ...schema import arrow_schema

    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    if row.get("status") != "done":
        return f"status {row.get('status')!r}, not 'done'"
    declared = arrow_schema("sweep")
    for key in ("reason", *ANSWER):
        if key not in row:
            return f"no {key!r} key"
        kind = declared.field(key).type
        if not _fits(row[key], kind):
            return f"{key}: expected {_KINDS[str(kind)]} or null, got {repr(row[key])[:60]}"
    return None


def _fits(value: Any, kind: pa.DataType) -> bool:
    if value is None:
        return True
    if pa.types.is_string(kind):
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return INT64[0] <= value <= INT64[1]
    if pa.types.is_integer(kind):
        return value.is_integer() and INT64[0] <= value <= INT64[1]
    return True  # NaN included: a figure the run could not tell


def write(folder: Path, row: dict) -> None:
    with atomic_open(folder / MARKER) as f:
        f.write(json.dumps(row, indent=1, allow_nan=True, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python number, anything else JSON lacks as its text."""
    return value.item() if isinstance(value, np.generic) else str(value)


def fresh(folder: Path) -> None:
    """An empty folder for the point: what an earlier, unfinished attempt left removed.
    Never through a symbolic link: one at the folder or at its points/ is refused
    (LinkRefused), nothing removed; so is a file in the place of either (NotAFolder)."""
    for path in (folder, folder.parent):
        why = link_refusal(path)
        if why:
            raise LinkRefused(why)
        why = not_a_folder(path)
        if why:
            raise NotAFolder(why)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
