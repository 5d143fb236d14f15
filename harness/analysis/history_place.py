"""Where `history add` may write (docs/comparing.md, "The store"): a new place (a path that
does not exist, or an empty folder), or a history store it made, which its marker
(history.json) says. Never a run folder, a baseline or a report, nor inside one, nor a
folder that holds anything else; never through a symbolic link. A store from before the
marker (its every file a history file) is taken as one and marked.

Hidden names are left alone: a write in progress (`.NAME.XXXXXXXX.tmp`), and what a git
worktree of the store's branch holds (`.git`, docs/ci.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from fileio.atomic import atomic_open
from fileio.json_file import read_json

from ..errors import BadInput
from .destination import check_place, contents, listed, name

MARKER = "history.json"
KIND = "steptrace history store"  # the marker's "kind"
FORMAT = 2  # 2: the `runner` column and the marker (1: neither)


def check(store: Path, sources: Sequence[Path]) -> None:
    """BadInput naming `store` unless `add` may write there: a new place, or a store (its
    marker, beside which the files `add` wrote only; or, from before the marker, `.parquet`
    files only), holding no symbolic link. `sources`: the runs added, which the store must
    neither be, hold nor lie inside. The files themselves are read by the caller."""
    if check_place(store, sources, role="the run {}, which history add reads",
                   writes="history add writes a store",
                   own="a history store is a folder of its own"):
        return  # nothing there: a new store
    entries = [p for p in sorted(store.iterdir()) if not p.name.startswith(".")]
    for path in entries:
        refuse_link(path, store)
    foreign = [p for p in entries if p.suffix != ".parquet" and p.name != MARKER]
    if check_marker(store):
        if foreign:
            raise BadInput(f"{store}: a history store, but it also holds "
                           f"{listed([name(p) for p in foreign])}, which history add did "
                           f"not write: move it out first")
    elif foreign:  # none where it holds hidden names only: another add's marker in flight
        raise BadInput(f"{store} is not a history store: it holds {contents(store)} and no "
                       f"{MARKER}; history add writes only into a store it made, an empty "
                       f"folder or a new path")


def check_marker(store: Path) -> bool:
    """Whether `store` holds a marker (a store from before the marker holds none); BadInput
    naming it where it is not one: a link, not a regular file (a FIFO), not the JSON `add`
    writes. What reading and adding both ask first."""
    marker = store / MARKER
    if not os.path.lexists(marker):
        return False
    refuse_link(marker, store)
    why = _not_a_marker(marker)
    if why:
        raise BadInput(f"{marker}: not a history store's marker: {why}; a history store "
                       f"is a folder history add made (an empty folder or a new path)")
    return True


def mark(store: Path) -> None:
    """The store's marker, written where missing (a new store, or one from before it)."""
    marker = store / MARKER
    refuse_link(marker, store)
    if not marker.exists():
        with atomic_open(marker, "w") as f:
            f.write(json.dumps(dict(kind=KIND, format=FORMAT), indent=1) + "\n")


def refuse_link(path: Path, store: Path) -> None:
    """BadInput where `path`, in `store`, is a symbolic link: a store's files are the ones
    `add` wrote, and nothing is written or read through a link."""
    if path.is_symlink():
        raise BadInput(f"{path}: a symbolic link (to {os.readlink(path)}) in the history "
                       f"store {store}: history add never writes through one; remove it")


def _not_a_marker(marker: Path) -> str:
    """"" for a store's marker, else what the file is instead."""
    data, why = read_json(marker)
    if why:
        return why
    if not isinstance(data, dict) or data.get("kind") != KIND:
        found = data.get("kind") if isinstance(data, dict) else type(data).__name__
        return f"expected \"kind\": {json.dumps(KIND)}, got {found!r}"
    return ""
