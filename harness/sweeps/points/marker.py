"""A point's completion: `point.json`, its row, written atomically as the last thing the
point does. A folder without it (a point killed or failed part way) is not complete: it is
removed and the point runs again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

from ...io.atomic import atomic_open

MARKER = "point.json"


def read(folder: Path) -> Optional[dict]:
    """The completed point's row; None where the folder holds no complete point."""
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def write(folder: Path, row: dict) -> None:
    with atomic_open(folder / MARKER) as f:
        f.write(json.dumps(row, indent=1, allow_nan=True, default=str) + "\n")


def fresh(folder: Path) -> None:
    """An empty folder for the point: what an earlier, unfinished attempt left removed."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
