"""The table writer: a process of its own that encodes and writes a run's streamed tables.

A writer thread in the harness's own process would take the GIL the engine's thread is
being measured with, and wait for it after every pyarrow call that lets it go (a GIL
convoy: a chunk's write took 26 - 84 ms instead of 3 - 5 while the engine ran). Here the
harness only pipes each chunk's columns across, raw, and goes on.

Wire format, one message at a time down the child's stdin: a header (the pickle's length,
the buffer count, each buffer's length), a pickle (protocol 5) of the message, and its
numpy buffers out of band, so columns cross as their bytes in one `writev`. Messages:
`("open", run_dir, fmt, labels, names, dictionaries)`, then `("write", {name: columns})`
per chunk, then `("close",)`; the child answers `close` with one JSON line:
`{"errors": {table: message}}`.

A table whose write fails is given up (its temporary file removed, never renamed into
place); the writer then closes the other tables and stops reading, so the harness's next
send fails and the run stops there, failed. If the pipe ends without `close` (the harness was killed, or
crashed), the writer closes every table as it stands, each holding every chunk it
received, and marks the run killed in its manifest.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from .atomic import atomic_open
from .schema import TABLES
from .table_sink import TableSink, dictionary

PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])  # the directory holding harness/
PIPE_BYTES = 1 << 20  # Linux's default limit for an unprivileged process
_HEADER = struct.Struct("<QI")  # pickle length, buffer count; then one <Q per buffer


class TableWriter:
    """The harness's end: starts the writer process and sends it chunks. `write` may be
    called from one thread at a time."""

    def __init__(self, run_dir: Path, fmt: str, names: Sequence[str],
                 labels: Optional[Dict[str, object]] = None,
                 dictionaries: Optional[Mapping[str, Sequence[str]]] = None) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "harness.table_writer"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env,
            start_new_session=True)  # Ctrl-C reaches the harness, which closes the tables
        self._fd = self._process.stdin.fileno()
        try:  # a chunk crosses in a few large reads, not hundreds of 64 KiB wake-ups
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # the system's limit is lower: the default pipe works, in more wake-ups
        self._send(("open", str(run_dir), fmt, labels or {}, list(names),
                    {k: list(v) for k, v in (dictionaries or {}).items()}))
        # Ready before the run: a writer still importing or warming up pyarrow would hold
        # up the first chunks, and the engine behind them.
        if self._process.stdout.readline() != b"ready\n":
            raise OSError(f"the table writer process did not start (status "
                          f"{self._process.wait()})")

    def write(self, tables: Mapping[str, Mapping[str, object]]) -> None:
        """One chunk of each named table: columns of numpy arrays (or lists of text);
        a dictionary column as codes into its names."""
        self._send(("write", dict(tables)))

    def close(self) -> None:
        """Every table closed and renamed into place; raises OSError naming each table
        that could not be written (that table is not left behind)."""
        try:
            self._send(("close",))
        except OSError:
            pass  # the writer is gone: its exit status says why, below
        self._process.stdin.close()
        answer = self._process.stdout.read()
        self._process.stdout.close()
        code = self._process.wait()
        try:
            errors = json.loads(answer)["errors"]
        except (ValueError, KeyError, TypeError):
            raise OSError(f"the table writer process exited with status {code} "
                          "before closing the tables") from None
        if errors:
            raise OSError("; ".join(f"{name}: {message}" for name, message in errors.items()))

    def _send(self, message) -> None:
        _write_all(self._fd, frame(message))


def frame(message) -> list:
    """The message as the pipe carries it: header, pickle, buffers (not copied)."""
    buffers = []
    meta = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    header = _HEADER.pack(len(meta), len(views)) + struct.pack(
        f"<{len(views)}Q", *(v.nbytes for v in views))
    return [header, meta, *views]


def _write_all(fd: int, parts) -> None:
    """writev until every byte is out (a signal can cut a pipe write short)."""
    parts = [memoryview(p).cast("B") for p in parts]
    while parts:
        n = os.writev(fd, parts)
        while parts and n >= len(parts[0]):
            n -= len(parts[0])
            parts.pop(0)
        if parts:
            parts[0] = parts[0][n:]


def _read_exact(f, n: int) -> Optional[bytearray]:
    """n bytes, or None if the pipe ends first."""
    data = bytearray(n)
    view, at = memoryview(data), 0
    while at < n:
        got = f.readinto(view[at:])
        if not got:
            return None
        at += got
    return data


def _receive(f):
    """The next message, or None at the pipe's end (a message cut short counts as none)."""
    header = _read_exact(f, _HEADER.size)
    if header is None:
        return None
    meta_len, count = _HEADER.unpack(header)
    sizes = _read_exact(f, 8 * count)
    meta = None if sizes is None else _read_exact(f, meta_len)
    if meta is None:
        return None
    buffers = []
    for size in struct.unpack(f"<{count}Q", sizes):
        buffer = _read_exact(f, size)
        if buffer is None:
            return None
        buffers.append(buffer)
    return pickle.loads(meta, buffers=buffers)


class _Tables:
    """The writer process's side: one TableSink per table."""

    def __init__(self, run_dir: str, fmt: str, labels, names, dictionaries) -> None:
        self.run_dir = Path(run_dir)
        self._sinks = {name: TableSink(self.run_dir, name, fmt, labels) for name in names}
        self._dictionaries = dictionaries
        self.errors: Dict[str, str] = {}

    def write(self, tables) -> None:
        for name, columns in tables.items():
            if name in self.errors:
                continue
            try:
                self._sinks[name].write(pa.table({c: self._array(c, v)
                                                  for c, v in columns.items()}))
            except Exception as error:  # noqa: BLE001 - reported at close, the table given up
                self._give_up(name, error)

    def close(self) -> None:
        for name, sink in self._sinks.items():
            if name not in self.errors:
                try:
                    sink.close()
                except Exception as error:  # noqa: BLE001
                    self._give_up(name, error)

    def _array(self, name: str, values):
        if name in self._dictionaries:
            return dictionary(values, self._dictionaries[name])
        if isinstance(values, np.ndarray) and values.dtype != object:
            return values
        return pa.array(values, pa.string())

    def _give_up(self, name: str, error: Exception) -> None:
        self.errors[name] = f"{type(error).__name__}: {error}"
        self._sinks[name].abort()


def _warm_up(fmt: str, labels, names, dictionaries) -> None:
    """A row of each table through every step of a write, into a folder thrown away: the
    first chunk through pyarrow costs about 0.7 s of one-off set-up (compute kernels, the
    Parquet writer), paid here before the harness is told the writer is ready."""
    with tempfile.TemporaryDirectory(prefix="steptrace-writer-") as scratch:
        tables = _Tables(scratch, fmt, labels, names, dictionaries)
        tables.write({name: {c.name: _one_row(c, dictionaries) for c in TABLES[name].columns}
                      for name in names})
        for sink in tables._sinks.values():
            sink.abort()


def _one_row(column, dictionaries):
    if column.name in dictionaries:
        return np.zeros(1, np.int8)
    if pa.types.is_dictionary(column.type) or pa.types.is_string(column.type):
        return np.array([""], dtype=object)
    return np.zeros(1, column.type.to_pandas_dtype())


def _mark_killed(run_dir: Path) -> None:
    """The manifest says the run was killed: its process ended without closing it."""
    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
        manifest["killed"] = dict(
            detected=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            note="the harness's process ended without closing the run; the tables hold "
                 "every chunk it handed to the table writer")
        with atomic_open(path) as f:
            f.write(json.dumps(manifest, indent=2) + "\n")
    except (OSError, ValueError):
        pass  # no manifest to mark: `show` will not call the folder a run anyway


def main() -> int:
    stdin = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    opened = _receive(stdin)
    if opened is None:
        return 0
    tables = _Tables(*opened[1:])
    _warm_up(*opened[2:])
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    closed = False
    try:
        while (message := _receive(stdin)) is not None:
            if message[0] == "close":
                closed = True
                break
            tables.write(message[1])
            if tables.errors:  # the run has failed: the harness hears it at its next send
                closed = True
                break
    except Exception as error:  # noqa: BLE001 - a message it cannot read: answered now,
        tables.errors["table writer"] = f"{type(error).__name__}: {error}"  # read at close
        closed = True
    tables.close()
    if closed:
        sys.stdout.write(json.dumps(dict(errors=tables.errors)) + "\n")
    else:
        _mark_killed(tables.run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
