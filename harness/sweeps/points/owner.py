"""A sweep's folder, `<output>/<name>/`, and its owner: the one sweep running points in it.

Resume removes a point folder without `point.json` as an attempt that did not finish, so a
second sweep in the same folder would remove the first's running points, and both would
write the table's one temporary file. A sweep therefore locks its folder before any point
runs and holds it until its table is written and its last worker has ended (a worker
stopped by a signal still writes its point's interrupted run): `flock` on LOCK, which names
the owner's pid and host; a second sweep there is refused. The kernel drops the lock when
the owner's process ends, however it ends: a sweep killed with SIGKILL leaves nothing that
blocks its resume.

Resume deletes, so the folder, its `points/` and each point's folder must be the sweep's
own: a symbolic link at any of them is refused, as `run` refuses one at its run folder.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Optional

from fileio.own_folder import link_refusal as linked, not_a_folder
from fileio.path_names import unnamable

from ...errors import BadInput
from .point import POINTS

LOCK = ".sweep.lock"


class LinkRefused(RuntimeError):
    """A symbolic link where a sweep writes (and resume deletes)."""


class NotAFolder(RuntimeError):
    """A file where a sweep keeps a point's folder."""


def link_refusal(path: Path) -> Optional[str]:
    """Why a sweep may not write at `path`: a symbolic link there; None where it may."""
    return linked(path, "a sweep writes and resumes")


@contextmanager
def owned(folder: Path, points: Iterable[Path] = ()) -> Iterator[Path]:
    """`folder` made and locked for the block; BadInput, before any point runs, where it
    cannot be: a name no file system holds, a symbolic link at the folder, at its points/
    or at one of the `points` folders, a file in the place of any of them, a folder that
    cannot be made or written (read-only, full), or another sweep owning it."""
    why = unnamable(folder)
    if why:
        raise BadInput(f"the sweep's folder {str(folder)!r} {why}")
    points = list(points)
    _refuse_links([folder, folder / POINTS, *points])
    for path, what in ((folder, "folder"), (folder / POINTS, "points folder"),
                       *((point, "point's folder") for point in points)):
        why = not_a_folder(path)
        if why:
            raise BadInput(f"the sweep's {what} {why}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot make the sweep's folder {folder}: {e.strerror}") from None
    lock = _lock(folder)
    try:
        yield folder
    finally:
        os.close(lock)


def _refuse_links(paths: Iterable[Path]) -> None:
    for path in paths:
        why = link_refusal(path)
        if why:
            raise BadInput(why)


def _lock(folder: Path) -> int:
    """LOCK's descriptor, locked and naming this process; BadInput where another holds it
    or it cannot be written."""
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:  # a read-only file system, a link planted there (ELOOP), ...
        raise BadInput(f"cannot write the sweep's folder {folder}: {path.name}: "
                       f"{e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{path} is not a regular file: a sweep's lock is one")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BadInput(f"{folder} is in use by another sweep ({_owner(fd)}; its lock "
                           f"{LOCK}): a second sweep there would remove the first's "
                           f"running points; wait for it to end, or set another output") \
                from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError as e:  # a full disk
            raise BadInput(f"cannot write the sweep's folder {folder}: {path.name}: "
                           f"{e.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _owner(fd: int) -> str:
    """What the lock's holder wrote there: "pid 1234 on host"."""
    text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    return text or "its pid not yet written"
