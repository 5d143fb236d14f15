"""Outputs written whole or not at all: every file the harness writes outside the recorder's
table sinks (converted traces, manifest.json). Each goes to a temporary name in its
directory and is renamed over the final name only once it is written, flushed to disk and
closed.

A full disk, any other write error, or an exception in the code writing the file removes
the temporary file and leaves whatever was under the final name before untouched; the
error, WriteFailed, names the final path. (The run's tables follow the same pattern in
harness/record/table_sink.py.)

The rename would put a plain file in place of whatever is under the final name, so a path
that exists and is not a regular file (a device, a FIFO, a socket, a directory), itself or
where its symbolic link points, is refused before anything is written: as root, a
conversion to /dev/null used to replace the device node.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Union

from .regular import KINDS


class WriteFailed(OSError):
    """Writing an output failed (a full disk, no permission, no such directory). Nothing
    was left under its name, nor under a temporary one."""

    def __init__(self, path: Union[str, Path], error: OSError) -> None:
        super().__init__(error.errno, error.strerror or str(error), str(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


class NotAnOutputFile(WriteFailed):
    """The output's path is not a regular file, nor a symbolic link to one: nothing was
    written, the path left as it was. strerror says what it is."""

    def __init__(self, path: Union[str, Path], what: str) -> None:
        super().__init__(path, OSError(errno.EEXIST, what))


def check_output(path: Union[str, Path]) -> None:
    """NotAnOutputFile unless `path` is absent, a regular file or a symbolic link to one (a
    link is written through; a broken one creates its target)."""
    _check(path, os.path.realpath(path))


def _check(path, final) -> None:
    try:
        mode = os.stat(final).st_mode
    except OSError:  # absent (a new file), or not reachable: then the write says why
        return
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in KINDS if test(mode)), "something else")
    link = f"a symbolic link to {final}, " if os.path.islink(path) else ""
    raise NotAnOutputFile(path, f"is {link}{kind}, not a regular file")


@contextmanager
def atomic_open(path: Union[str, Path], mode: str = "w", **kwargs) -> Iterator[IO]:
    """A new file to write `path` through: mode "w" (text) or "wb" (bytes), open()'s other
    keywords as given. Where `path` is a symbolic link its target is replaced, as open()
    would have written it. Raises NotAnOutputFile where check_output refuses `path`, before
    and again just before the rename; WriteFailed for an OSError from the body, the flush,
    the close or the rename."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    final = Path(os.path.realpath(path))
    tmp = None
    try:
        _check(path, final)
        tmp, file = _create(final, "x" + mode[1:], kwargs)
        with file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        _check(path, final)  # nor a node made there while the file was written
        os.replace(tmp, final)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if isinstance(e, OSError) and not isinstance(e, WriteFailed):
            raise WriteFailed(path, e) from e
        raise


def _create(final: Path, mode: str, kwargs) -> tuple:
    """A new hidden file beside `final`, never one that existed (permissions as open()'s)."""
    while True:
        tmp = final.parent / f".{final.name}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, open(tmp, mode, **kwargs)
        except FileExistsError:
            continue
