"""Outputs written whole or not at all: every file the harness writes outside the recorder's
table sinks (converted traces, manifest.json) goes to a temporary name in its directory and
is renamed over the final name only once it is written, flushed to disk and closed.

A full disk, any other write error, or an exception in the code writing the file removes
the temporary file and leaves whatever was under the final name before untouched; the
error names the final path. (The run's tables follow the same pattern in
harness/table_sink.py.)
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Union


class WriteFailed(OSError):
    """Writing an output failed (a full disk, no permission, no such directory). Nothing
    was left under its name, nor under a temporary one."""

    def __init__(self, path: Union[str, Path], error: OSError) -> None:
        super().__init__(error.errno, error.strerror or str(error), str(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


@contextmanager
def atomic_open(path: Union[str, Path], mode: str = "w", **kwargs) -> Iterator[IO]:
    """A new file to write `path` through: mode "w" (text) or "wb" (bytes), open()'s other
    keywords as given. Where `path` is a symbolic link its target is replaced, as open()
    would have written it. Raises WriteFailed for an OSError from the body, the flush, the
    close or the rename."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    final = Path(os.path.realpath(path))
    tmp = None
    try:
        tmp, file = _create(final, "x" + mode[1:], kwargs)
        with file:
            yield file
            file.flush()
            os.fsync(file.fileno())
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
