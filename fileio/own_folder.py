"""Folders a command writes into must be its own: a symbolic link at one would take the
writes (and a sweep's resume, its deletes) wherever it points, and a file in a folder's
place cannot hold one. What `run` and `sweep` say of each, in one wording."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def link_refusal(path: Path, writer: str) -> Optional[str]:
    """Why `writer` ("a run writes") may not write at `path`: a symbolic link there; None
    where it may."""
    if not path.is_symlink():
        return None
    return (f"{path} is a symbolic link (to {os.readlink(path)}): {writer} only into "
            f"folders of its own; remove the link or set output to where it points")


def not_a_folder(path: Path, shown: object = None) -> Optional[str]:
    """Why `path` cannot hold a command's files: a file (anything but a folder, or a link
    to one) in its place, said as `shown` (default: the path); None where it can."""
    if path.exists() and not path.is_dir():
        return f"{path if shown is None else shown} exists and is not a directory"
    return None
