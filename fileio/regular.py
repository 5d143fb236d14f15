"""Input files are regular files: a FIFO blocks its reader until a writer comes (forever, if
none does), a device never ends, and neither can be read twice or hashed for the manifest.
What a path is instead is said, never "file not found"."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISSOCK, "a socket"))


class NotAFile(OSError):
    """An input path that is not a readable regular file; str() says what it is."""


def not_regular(path) -> Optional[str]:
    """None for a readable regular file, else what the path is: 'no such file', 'is a FIFO
    (named pipe), not a regular file', 'is not readable (permission denied)', ..."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "is a broken symbolic link" if path.is_symlink() else "no such file"
    except OSError as e:
        return f"is not accessible ({e.strerror})"
    if stat.S_ISREG(mode):
        return None if os.access(path, os.R_OK) else "is not readable (permission denied)"
    kind = next((name for test, name in KINDS if test(mode)), "something else")
    return f"is {kind}, not a regular file"


def check_regular(path) -> Path:
    """The path, or NotAFile('PATH: is a FIFO (named pipe), not a regular file')."""
    why = not_regular(path)
    if why is None:
        return Path(path)
    raise NotAFile(f"{path}: {why}")
