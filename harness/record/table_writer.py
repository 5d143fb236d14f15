"""The table writer: a process of its own that encodes and writes a run's streamed tables.

A writer thread in the harness's own process would take the GIL the engine's thread is
being measured with, and wait for it after every pyarrow call that lets it go (a GIL
convoy: a chunk's write took 26 - 84 ms instead of 3 - 5 while the engine ran). Here the
harness's sender thread only pipes each chunk's columns across, as their bytes, in one
`writev`: no pyarrow call on that side (building Arrow arrays there, for Arrow IPC, brought
the convoy back: tests/bench/README.md); the writer builds the tables and encodes them.

Wire format, one message at a time down the child's stdin: the head's length (8 bytes,
little-endian), the head (a JSON object: `kind`; `sizes`, the byte length of each payload
that follows), then the payloads. Messages: `open` (`run_dir`, `format`, `labels`,
`names`, `dictionaries`), answered `ready` (or `not started: <why>`, and the writer exits);
then `write` per chunk (`columns`: for each table its columns' names and types, one
payload each, in order: a numpy dtype of fixed-width numbers or booleans and the column's
bytes, or `text` and a JSON list of strings; a dictionary column as its codes); then
`close`, answered with one JSON line:
`{"errors": {table: message}}`. Nothing on the wire can run code, though another process
of the user's can write to the writer's stdin: JSON decodes to values, and bytes become
numbers only through a dtype from a fixed list. Anything else (no JSON object, an unknown
kind or type, a table never opened, a payload whose length does not fit its type) is
refused: the writer closes the tables whole, answers with the reason and stops reading, as
after a failed write.

One process serves runs in turn (a sweep's, a capacity search's, the calibration's, a test
session's): after `close` it waits for the next `open`, and the harness keeps one idle
writer for the next run instead of starting a process (and warming up pyarrow: about
0.7 s) for each. Only a writer that closed its run cleanly is kept; one that ended a run
with an error stops serving. A writer warms up as it starts, before its first `open`:
`steptrace run` starts one first thing (start_early), so that it is ready by the time the
run is. The harness waits for `ready` only where the real clock measures the steps
(Recorder.tables_ready); otherwise the first chunk or the close waits for it, and a writer
that did not start raises NotStarted there. At exit an idle writer's pipe is closed and
nothing waits for it.

A table whose write fails is given up (its temporary file removed, never renamed into
place); the writer then closes the other tables and stops reading, so the harness's next
send fails and the run stops there, failed. If the pipe ends without `close` (the harness
was killed, or crashed), the writer closes every table as it stands, each holding every
chunk it received, and marks the run killed in its manifest; a message cut short is
dropped. A pipe that ends between runs ends an idle writer: nothing is open.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import numpy as np
import pyarrow as pa

from fileio.atomic import atomic_open

from ..io import child_process
from ..schema import TABLES
from ..schema.column import CODES
from .table_sink import TableSink

PIPE_BYTES = 1 << 20  # Linux's default limit for an unprivileged process
HEAD_BYTES = 1 << 20  # the longest head read: `open`'s labels and dictionaries are short
TEXT = "text"  # a column's type on the wire: a JSON list of strings
_LENGTH = struct.Struct("<Q")
_KINDS = ("open", "write", "close")
STREAMED = ("steps", "batches", "requests")  # the tables a run streams (the recorder's)
_DTYPES = {np.dtype(t).str: np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32,
                                                  np.int64, np.uint8, np.uint16, np.uint32,
                                                  np.uint64, np.float32, np.float64)}


Column = Union[np.ndarray, Sequence[str]]  # numbers or booleans, or text


def coded(names: Sequence[str]) -> Dict[str, Tuple[str, ...]]:
    """The names by code of the tables' coded columns (written as codes)."""
    return {c.name: c.names_by_code() for name in names for c in TABLES[name].columns
            if c.values and c.type == CODES}


class Refused(ValueError):
    """A message the writer will not read."""


class NotStarted(OSError):
    """The table writer process did not start serving the run: none of its tables was
    begun. The message carries the writer's own reason where it gave one."""


class TableWriter:
    """The harness's end of one run's tables: a writer process (an idle one, else a new
    one) opened on run_dir, sent chunks, closed. `write` may be called from one thread at a
    time. Opening does not wait for the writer: the first write (or close) does, or
    `ready()`; a writer that did not start raises NotStarted there."""

    def __init__(self, run_dir: Path, fmt: str, names: Sequence[str],
                 labels: Optional[Dict[str, object]] = None,
                 dictionaries: Optional[Mapping[str, Sequence[str]]] = None) -> None:
        self._process = _idle_writer() or _WriterProcess()
        # absolute: a writer started for an earlier run resolves paths from where it started
        self._process.open(dict(kind="open", run_dir=str(Path(run_dir).absolute()), format=fmt,
                                labels=labels or {}, names=list(names),
                                dictionaries={k: list(v)
                                              for k, v in (dictionaries or {}).items()}))

    def ready(self) -> None:
        """Waits until the writer serves the run (a new one imports and warms up pyarrow
        first: about 0.7 s); NotStarted if it does not."""
        self._process.ready()

    def write(self, tables: Mapping[str, Mapping[str, Column]]) -> None:
        """One chunk of each named table: columns of numpy arrays (or lists of text);
        a dictionary column as codes into its names."""
        self._process.ready()
        columns, payloads = encoded(tables)
        self._process.send(dict(kind="write", columns=columns), payloads)

    def close(self) -> None:
        """Every table closed and renamed into place; raises OSError naming each table
        that could not be written (that table is not left behind). A writer that closed
        the run cleanly waits idle for the next run."""
        self._process.ready()
        errors = self._process.close_run()
        if errors:
            raise OSError("; ".join(f"{name}: {message}" for name, message in errors.items()))
        _keep_idle(self._process)


class _WriterProcess:
    """One writer process and its pipes."""

    def __init__(self) -> None:
        self.popen = subprocess.Popen(
            child_process.command("harness.record.table_writer"), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=child_process.environment(),
            start_new_session=True)  # Ctrl-C reaches the harness, which closes the tables
        self.pid = self.popen.pid
        stdin, stdout = self.popen.stdin, self.popen.stdout
        assert stdin is not None and stdout is not None  # both opened as pipes
        self._stdin, self._stdout = stdin, stdout
        self._fd = stdin.fileno()
        self._started: Union[bool, NotStarted] = False  # the current run's `open` answered
        try:  # a chunk crosses in a few large reads, not hundreds of 64 KiB wake-ups
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # the system's limit is lower: the default pipe works, in more wake-ups

    def open(self, head: dict) -> None:
        """The run opened; its answer is read by ready()."""
        self._started = False
        try:
            self.send(head)
        except OSError:
            pass  # the writer is gone: ready() says so, with its status

    def ready(self) -> None:
        if self._started is True:
            return
        if self._started is False:
            answer = self._stdout.readline()  # b"" if it is gone: its status says why
            if answer == b"ready\n":
                self._started = True
                return
            self.end()
            why = answer.decode(errors="replace").strip() or \
                f"it exited with status {self.popen.returncode}"
            self._started = NotStarted(f"the table writer process did not start: {why}")
        raise self._started

    def send(self, head: dict, payloads: Sequence = ()) -> None:
        _write_all(self._fd, frame(head, payloads))

    def close_run(self) -> dict:
        """The run's tables closed: {table: why it could not be written}. A writer that
        answers with errors has stopped serving, and is ended."""
        try:
            self.send(dict(kind="close"))
        except OSError:
            pass  # the writer stopped reading (a refused message): its answer is waiting
        answer = self._stdout.readline()  # b"" if it is gone: its status says why
        try:
            errors = json.loads(answer)["errors"]
        except (ValueError, KeyError, TypeError):
            self.end()
            raise OSError(f"the table writer process exited with status "
                          f"{self.popen.returncode} before closing the tables") from None
        if errors:
            self.end()
        return errors

    def end(self, wait: bool = True) -> None:
        """The pipe closed (an idle writer exits; one in a run closes it as killed)."""
        for pipe in (self._stdin, self._stdout):
            try:
                pipe.close()
            except OSError:
                pass
        if wait:
            self.popen.wait()

    def alive(self) -> bool:
        return self.popen.poll() is None


_idle: List[_WriterProcess] = []  # at most one: runs come one after another
_idle_lock = threading.Lock()


def _idle_writer() -> Optional[_WriterProcess]:
    with _idle_lock:
        while _idle:
            process = _idle.pop()
            if process.alive():
                return process
            process.end()
    return None


def _keep_idle(process: _WriterProcess) -> None:
    with _idle_lock:
        if not _idle and process.alive():
            _idle.append(process)
            return
    process.end()


def start_early() -> None:
    """A writer started now, kept idle for the next run: it imports and warms up pyarrow
    (about 0.7 s) while this process prepares the run."""
    with _idle_lock:
        if _idle:
            return
    _keep_idle(_WriterProcess())


def end_idle(wait: bool = True) -> None:
    """Idle writers' pipes closed: each exits, with nothing open; with `wait`, waited for (a
    process that leaves without its exit handlers, a stopped sweep's worker, leaves none)."""
    with _idle_lock:
        while _idle:
            _idle.pop().end(wait=wait)


@atexit.register
def _end_idle() -> None:
    """At exit, end_idle without waiting: the writer, with nothing open, ends on its own."""
    end_idle(wait=False)


def encoded(tables: Mapping[str, Mapping[str, Column]]) -> Tuple[dict, list]:
    """Each table's columns described ([name, type] pairs) and their payloads, in order:
    numbers and booleans as their own bytes (not copied), the rest as a JSON list of text."""
    columns: Dict[str, List[List[str]]] = {}
    payloads: List[Union[np.ndarray, bytes]] = []
    for name, table in tables.items():
        described = columns[name] = []
        for column, values in table.items():
            if isinstance(values, np.ndarray) and values.dtype.str in _DTYPES:
                values = np.ascontiguousarray(values)
                described.append([column, values.dtype.str])
                payloads.append(values)
            else:
                described.append([column, TEXT])
                payloads.append(json.dumps(values.tolist() if isinstance(values, np.ndarray)
                                           else list(values)).encode())
    return columns, payloads


def frame(head: dict, payloads: Sequence = ()) -> list:
    """The message as the pipe carries it: the head's length, the head, the payloads."""
    text = json.dumps({**head, "sizes": [memoryview(p).nbytes for p in payloads]}).encode()
    return [_LENGTH.pack(len(text)), text, *payloads]


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


def _read_exact(f, n: int) -> Optional[np.ndarray]:
    """n bytes, or None if the pipe ends first."""
    try:  # not zeroed: memory is taken as bytes arrive, not as a length claims
        data = np.empty(n, np.uint8)
    except (MemoryError, ValueError):
        raise Refused(f"a message of {n} bytes") from None
    view, at = data.data, 0
    while at < n:
        got = f.readinto(view[at:])
        if not got:
            return None
        at += got
    return data


def _receive(f) -> Optional[Tuple[dict, List[np.ndarray]]]:
    """The next message, its head and its payloads, or None at the pipe's end (a message
    cut short counts as none); Refused if it is not a message."""
    length = _read_exact(f, _LENGTH.size)
    if length is None:
        return None
    (n,) = _LENGTH.unpack(length.data)
    if n > HEAD_BYTES:
        raise Refused(f"a message head of {n} bytes")
    text = _read_exact(f, n)
    if text is None:
        return None
    head = _head(text.tobytes())
    payloads = []
    for size in head["sizes"]:
        payload = _read_exact(f, size)
        if payload is None:
            return None
        payloads.append(payload)
    return head, payloads


def _head(text: bytes) -> dict:
    try:
        head = json.loads(text.decode())
    except ValueError as error:
        raise Refused(f"a message head that is not JSON: {error}") from None
    if not isinstance(head, dict) or head.get("kind") not in _KINDS:
        raise Refused(f"a message head of no known kind: {text[:80]!r}")
    sizes = head.get("sizes")
    if not (isinstance(sizes, list) and all(type(s) is int and s >= 0 for s in sizes)):
        raise Refused(f"a `{head['kind']}` message without its payloads' sizes")
    return head


def _chunk(head: dict, payloads: List[np.ndarray]) -> Dict[str, Dict[str, object]]:
    """Each table's columns, from a `write` message: numbers (viewed, not copied) or text."""
    if head["kind"] != "write":
        raise Refused("a second `open` message")
    columns = _field(head, "columns", dict)
    if not all(isinstance(pairs, list) for pairs in columns.values()):
        raise Refused("a `write` message whose columns are not listed")
    described = [(name, pair) for name, pairs in columns.items() for pair in pairs]
    if len(described) != len(payloads):
        raise Refused("a `write` message whose columns are not one payload each")
    tables: Dict[str, Dict[str, object]] = {name: {} for name in columns}
    for (name, pair), payload in zip(described, payloads):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], str) and pair[0] not in tables[name]):
            raise Refused(f"a {name} column described as {pair!r}")
        tables[name][pair[0]] = _column(name, pair[0], pair[1], payload)
    return tables


def _column(table: str, name: str, kind: str, payload: np.ndarray):
    if kind == TEXT:
        try:
            values = json.loads(payload.tobytes().decode())
        except ValueError as error:
            raise Refused(f"{table}.{name}: text that is not JSON: {error}") from None
        if not (isinstance(values, list) and all(v is None or isinstance(v, str)
                                                 for v in values)):
            raise Refused(f"{table}.{name}: text that is not a list of strings")
        return values
    dtype = _DTYPES.get(kind)
    if dtype is None:
        raise Refused(f"{table}.{name}: a column of type {kind!r}")
    if payload.nbytes % dtype.itemsize:
        raise Refused(f"{table}.{name}: {payload.nbytes} bytes of {kind}")
    return payload.view(dtype)


def _field(head: dict, key: str, kind: type):
    value = head.get(key)
    if not isinstance(value, kind):
        raise Refused(f"a `{head['kind']}` message whose `{key}` is not a {kind.__name__}")
    return value


class _Tables:
    """The writer process's side: one TableSink per table."""

    def __init__(self, run_dir: str, fmt: str, labels, names, dictionaries) -> None:
        self.run_dir = Path(run_dir)
        self._sinks = {name: TableSink(self.run_dir, name, fmt, labels) for name in names}
        self._dictionaries = {name: pa.array(list(values), pa.string())
                              for name, values in dictionaries.items()}
        self.errors: Dict[str, str] = {}

    def write(self, tables: Mapping[str, Mapping[str, object]]) -> None:
        unopened = [name for name in tables if name not in self._sinks]
        if unopened:
            raise Refused(f"a chunk of tables never opened: {', '.join(unopened)}")
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
        if name in self._dictionaries:  # codes from the pipe: checked against the names
            return pa.DictionaryArray.from_arrays(pa.array(values), self._dictionaries[name])
        if isinstance(values, np.ndarray):
            return values
        return pa.array(values, pa.string())

    def _give_up(self, name: str, error: Exception) -> None:
        self.errors[name] = f"{type(error).__name__}: {error}"
        self._sinks[name].abort()


def _opening(head: dict, payloads) -> tuple:
    """run_dir, format, labels, names and dictionaries of the first message."""
    if head["kind"] != "open" or payloads:
        raise Refused(f"a `{head['kind']}` message before `open`")
    return (_field(head, "run_dir", str), _field(head, "format", str),
            _field(head, "labels", dict), _field(head, "names", list),
            _field(head, "dictionaries", dict))


def _warm_up(fmt: str, labels, names, dictionaries) -> None:
    """A row of each table through every step of a write, into a folder thrown away: the
    first chunk through pyarrow costs about 0.7 s of one-off set-up (compute kernels, the
    Parquet writer), paid here before the harness is told the writer is ready."""
    columns, payloads = encoded({name: {c.name: _one_row(c, dictionaries)
                                        for c in TABLES[name].columns} for name in names})
    payloads = [np.frombuffer(p, np.uint8) for p in payloads]  # as the pipe delivers them
    with tempfile.TemporaryDirectory(prefix="steptrace-writer-") as scratch:
        tables = _Tables(scratch, fmt, labels, names, dictionaries)
        tables.write(_chunk(dict(kind="write", columns=columns), payloads))
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
    warm: Set[str] = set()  # the formats warmed up
    while True:  # one run after another, until the pipe ends between runs
        try:
            if not warm:  # before the first run: it may be on its way (start_early)
                _warm_up("parquet", {}, STREAMED, coded(STREAMED))
                warm.add("parquet")
            opened = _receive(stdin)
            if opened is None:
                return 0
            opening = _opening(*opened)
            tables = _Tables(*opening)
            if opening[1] not in warm:
                _warm_up(*opening[1:])
                warm.add(opening[1])
        except Exception as error:  # noqa: BLE001 - the harness hears why: not started
            why = " ".join(f"{type(error).__name__}: {error}".split())  # one line
            _answer(f"not started: {why}")
            return 2
        _answer("ready")
        if not _serve(stdin, tables):
            _mark_killed(tables.run_dir)
            return 0
        _answer(json.dumps(dict(errors=tables.errors)))
        if tables.errors:  # the run failed: this writer serves no other
            return 0


def _answer(line: str) -> None:
    """One line to the harness. One that is gone (killed before the writer warmed up)
    reads nothing: the writer goes on, closes the run at the pipe's end and marks it."""
    data = memoryview((line + "\n").encode())
    try:
        while data:
            data = data[os.write(sys.stdout.fileno(), data):]
    except OSError:
        pass


def _serve(stdin, tables: _Tables) -> bool:
    """One run's chunks until `close`; its tables closed whole. False if the pipe ended
    first (the harness is gone)."""
    closed = False
    try:
        while (message := _receive(stdin)) is not None:
            if message[0]["kind"] == "close":
                closed = True
                break
            tables.write(_chunk(*message))
            if tables.errors:  # the run has failed: the harness hears it at its next send
                closed = True
                break
    except Exception as error:  # noqa: BLE001 - a message refused (or unreadable): answered
        tables.errors["table writer"] = f"{type(error).__name__}: {error}"  # now, read at close
        closed = True
    tables.close()
    return closed


if __name__ == "__main__":
    sys.exit(main())
