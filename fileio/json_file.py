"""A small JSON file the harness wrote (a marker, a manifest) read as data it may not be:
never opened where it is not a regular file (a FIFO would block the reader), and JSON
nested too deeply to parse is a reason, not a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Tuple

from .regular import not_regular


def read_json(path: Path) -> Tuple[object, str]:
    """(the file's JSON, "") or (None, why it cannot be read)."""
    why = not_regular(path)
    if why:
        return None, why
    try:
        return json.loads(path.read_text()), ""
    except RecursionError:
        return None, "unreadable (JSON nested too deeply)"
    except (OSError, ValueError) as e:
        return None, f"unreadable ({e})"
