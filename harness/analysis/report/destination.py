"""Where `steptrace report -o DIR` may write: a folder that does not exist, an empty one, or
a report it made. A report is marked by report.json (what it is, the command, the date and
the files it wrote) and holds nothing but those files, so replacing it deletes nothing
anyone else put there. Anything else at DIR is left alone (check).
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import List, Optional, Sequence

from ...errors import BadInput
from ..destination import REPORT_MARKER, check_place, contents, is_file, is_folder, listed, them

MARKER = REPORT_MARKER
KIND = "steptrace report"  # the marker's "kind": a report, not just a folder with a page
# The files a report writes, as its marker lists them; a marker naming any other is not one.
WRITES = re.compile(r"index\.html|summary\.md|figures/[a-z0-9_]+\.png|trace-events/[^/]+\.json")
FOLDERS = ("figures", "trace-events")


def check(dest: Path, runs: Sequence[Path],
          role: str = "the run folder {}, which the report reads") -> None:
    """BadInput unless a report may be written at `dest`: a new place (harness/analysis/
    destination.py: never a link, a file, nor a folder that is, holds or lies inside one of
    `runs`, the run folders the report reads, or inside another run folder, a baseline or
    a report), or a report (its marker and the files the marker lists, nothing else)."""
    dest = Path(dest)
    if check_place(dest, runs, role=role,
                   writes="a report is written",
                   own="write the report to a folder of its own"):
        return  # a new report: nothing there to lose
    try:
        _check_own(dest)
    except OSError as e:  # a folder it may not read
        raise BadInput(f"{dest}: cannot be inspected ({e.strerror or e})") from None


def marker(command: str, files: Sequence[str]) -> bytes:
    """The marker of a report written by `command`, holding `files`."""
    data = dict(kind=KIND, command=command,
                written=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                files=sorted(files))
    return (json.dumps(data, indent=1) + "\n").encode()


def _check_own(dest: Path) -> None:
    mark = dest / MARKER
    if not os.path.lexists(mark):
        raise BadInput(f"{dest} is not a report: it holds {contents(dest)} and no {MARKER}; "
                       f"report -o replaces only a report it made, or writes a new folder")
    files = _listed(mark)
    if files is None:
        raise BadInput(f"{mark}: not a report's marker ({_why_not(mark)}); report -o replaces "
                       f"only a report it made")
    extra = _foreign(dest, files)
    if extra:
        raise BadInput(f"{dest} holds {listed(extra)}, which a new report would delete: move "
                       f"{them(extra)} out first")


def _listed(mark: Path) -> Optional[set]:
    """The files a report's marker lists; None when `mark` is not one."""
    return None if _why_not(mark) else set(json.loads(mark.read_text())["files"])


def _why_not(mark: Path) -> str:
    """Why `mark` is not a report's marker; empty when it is."""
    if mark.is_symlink() or not mark.is_file():
        return "a symbolic link" if mark.is_symlink() else "not a file"
    try:
        data = json.loads(mark.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable: {e}"
    if not isinstance(data, dict) or data.get("kind") != KIND:
        found = data.get("kind") if isinstance(data, dict) else type(data).__name__
        return f"expected \"kind\": {json.dumps(KIND)}, got {found!r}"
    files = data.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return "expected \"files\": a list of file names"
    other = next((f for f in files if not WRITES.fullmatch(f)), None)
    if other is not None:
        return f"it lists {other!r}, which a report does not write"
    return ""


def _foreign(dest: Path, files: set) -> List[str]:
    """What `dest` holds that its marker does not list: names relative to it, a folder's
    with a slash."""
    out = []
    for entry in sorted(dest.iterdir()):
        if entry.name == MARKER:
            continue
        if entry.name in FOLDERS and is_folder(entry):
            out += [f"{entry.name}/{e.name}" + "/" * is_folder(e) for e in sorted(entry.iterdir())
                    if not is_file(e) or f"{entry.name}/{e.name}" not in files]
        elif not is_file(entry) or entry.name not in files:
            out.append(entry.name + "/" * is_folder(entry))
    return out
