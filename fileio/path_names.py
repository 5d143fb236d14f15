"""Paths the system can name: a NUL byte ends a path in every system call (Python refuses
it, "embedded null byte"), and a component longer than a file name holds (255 bytes,
NAME_MAX, on every common Linux file system) fails with "File name too long". Said before
anything is made, not found by the first mkdir or open."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

NAME_MAX = 255  # bytes in one component of a path


def unnamable(path: Union[str, Path]) -> Optional[str]:
    """Why `path` cannot name a file or folder; None where it can."""
    text = os.fspath(path)
    if "\0" in text:
        return "holds a NUL byte"
    for part in Path(text).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            return (f"has a component of {size} bytes ({part[:24]}...), longer than a "
                    f"file name can be ({NAME_MAX} bytes)")
    return None
