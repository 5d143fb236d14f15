"""One result table written chunk by chunk, atomically, in its declared schema.

Every chunk is cast to the table's declared columns (harness/schema), so a table has the
same dtypes whichever code path wrote it; a chunk missing a declared column or carrying
an undeclared one is an error. Chunks go to a hidden temporary file (Parquet row groups,
or CSV lines); close() renames it into place, so a reader sees either no table or a whole
one, never a torn file; a write or close that fails (a full disk) gives the table up,
leaving nothing under either name. The temporary file is made new (O_EXCL, O_NOFOLLOW) and
written through its descriptor: one a writer that ended part way left is removed first,
but a symbolic link at its name is refused, never written through (BadInput naming it),
and anything else there is a write fault; at the final name the rename replaces a link,
not its target. An interrupted run still closes its sinks: the tables hold every chunk
written (chunks are gathered into row groups of ROW_GROUP_ROWS, with min/max statistics
for the columns a reader selects rows by; close writes what is gathered). The run's labels
(some of run_id, gil_mode, overlap) join every chunk as constant columns, text ones
dictionary-encoded, so that every table reads back with the same dtypes (categorical).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, List, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from fileio.regular import KINDS

from ..errors import BadInput
from ..schema import TABLES, arrow_schema

FORMATS = ("parquet", "csv")
Labels = Mapping[str, Union[str, bool]]  # the run's constant columns: text, or a flag
# The columns a reader selects rows by get Parquet's min/max statistics per row group; the
# others none (on a modeled run the writer's encoding bounds the replay's speed, and the
# statistics of the batches table's columns were a third of it)
KEYS = ("run_id", "gil_mode", "role", "instance", "step", "dp_rank", "seq_id", "t_start_s",
        "arrival_s")
# Chunks are gathered into row groups of at least this many rows: a recorder's chunk (1,024
# steps) as a row group of its own made 455 small groups an hour and doubled the encoding
ROW_GROUP_ROWS = 65_536


def dictionary(codes: np.ndarray, names: Sequence[str]) -> pa.DictionaryArray:
    """Text stored as small integer codes into `names`."""
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(list(names), pa.string()))


class TableSink:
    def __init__(self, run_dir: Path, name: str, fmt: str,
                 labels: Optional[Labels] = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"table format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self.name = name
        self.path = Path(run_dir) / f"{name}.{fmt}"
        self._tmp = Path(run_dir) / f".{name}.{fmt}.tmp"
        self._fmt = fmt
        self._labels = labels or {}
        self.schema = arrow_schema(name, list(self._labels))
        self._declared = arrow_schema(name)  # a chunk's columns, without the labels
        self._writer: Optional[Union[pq.ParquetWriter, pa_csv.CSVWriter]] = None
        self._file: Optional[BinaryIO] = None  # the temporary file, made by this sink
        self._pending: List[pa.Table] = []  # chunks not yet written, fewer than a group's rows
        self._pending_rows = 0
        self._given_up = False

    def write(self, chunk) -> None:
        """Append a chunk (an Arrow table or a DataFrame) of the table's declared columns,
        in any order; an empty chunk still makes a table. If the write fails the table is
        given up: nothing is left under either name."""
        if self._given_up:
            raise ValueError(f"{self.path.name}: the table was given up after a failed write")
        try:
            self._write(chunk)
        except BaseException:
            self.abort()
            raise

    def _write(self, chunk) -> None:
        if not isinstance(chunk, pa.Table):  # a DataFrame: pandas itself is never imported
            chunk = pa.Table.from_pandas(chunk, preserve_index=False)
        self._check(chunk.column_names)
        chunk = chunk.select(self._declared.names)
        if not chunk.schema.equals(self._declared):  # a no-op cast still costs ~0.2 ms a chunk
            chunk = chunk.cast(self._declared)
        if self._writer is None:
            self._file = _create(self._tmp)
            if self._fmt == "csv":
                self._writer = pa_csv.CSVWriter(self._file, self.schema)
            else:  # numbers stored plain: dictionary-encoding them is slow
                text = [f.name for f in self.schema if pa.types.is_dictionary(f.type)]
                keys = [name for name in KEYS if name in self.schema.names]
                self._writer = pq.ParquetWriter(self._file, self.schema, use_dictionary=text,
                                                write_statistics=keys)
        self._pending.append(chunk)
        self._pending_rows += chunk.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        """The gathered chunks written as one row group, the run's labels joined."""
        pending, n = self._pending, self._pending_rows
        self._pending, self._pending_rows = [], 0
        if not pending:
            return
        group = pa.concat_tables(pending)
        for name, value in self._labels.items():
            group = group.append_column(name, pa.array(np.full(n, value))
                                        if isinstance(value, bool)
                                        else dictionary(np.zeros(n, np.int8), [value]))
        assert self._writer is not None  # made with the first chunk
        if not group.schema.equals(self.schema):  # the labels are built in their types
            group = group.cast(self.schema)
        self._writer.write_table(group)

    def _check(self, names) -> None:
        declared = TABLES[self.name].names
        missing = [c for c in declared if c not in names]
        undeclared = [c for c in names if c not in declared]
        if missing or undeclared:
            raise ValueError(f"{self.path.name}: the chunk lacks the declared columns "
                             f"{missing} and carries the undeclared {undeclared} "
                             f"(harness/schema/tables.py declares the {self.name} table)")

    def close(self) -> Optional[Path]:
        """The table in place; None (no file) if not even an empty chunk was written, or
        the table was given up. A close that fails gives the table up."""
        if self._writer is None:
            return None
        try:
            self._flush()
            self._writer.close()
            assert self._file is not None  # made with the writer
            self._file.close()  # a writer given a file leaves it open
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        self._writer, self._file = None, None
        return self.path

    def abort(self) -> None:
        """Give the table up: its temporary file removed, nothing renamed into place."""
        self._given_up = True
        self._pending, self._pending_rows = [], 0
        writer, self._writer = self._writer, None
        file, self._file = self._file, None
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the file goes anyway
                pass
        if file is not None:  # only what this sink made: never a link refused there
            try:
                file.close()
            except OSError:  # a full disk's last buffer: the file goes anyway
                pass
            if os.path.isfile(self._tmp) and not os.path.islink(self._tmp):
                os.unlink(self._tmp)


def _create(tmp: Path) -> BinaryIO:
    """`tmp` made new and open for writing; a regular file there (a writer that ended part
    way) removed first; BadInput naming a symbolic link there, an OSError anything else (a
    folder: IsADirectoryError)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.fdopen(os.open(tmp, flags, 0o644), "wb")
    except FileExistsError:
        mode = os.lstat(tmp).st_mode
        if stat.S_ISLNK(mode):
            raise BadInput(f"{tmp} is a symbolic link (to {os.readlink(tmp)}): a table is "
                           f"written only to a file of its own; remove the link") from None
        if not stat.S_ISREG(mode):  # a write fault, as writing into it would be
            kind = next((name for test, name in KINDS if test(mode)), "something else")
            raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EEXIST,
                          f"{kind} in its place, not a regular file", str(tmp)) from None
    os.unlink(tmp)
    return os.fdopen(os.open(tmp, flags, 0o644), "wb")


def write_table(df, run_dir: Path, name: str, fmt: str,
                labels: Optional[Labels] = None) -> Path:
    """A whole table in one chunk."""
    sink = TableSink(run_dir, name, fmt, labels)
    sink.write(df)
    path = sink.close()
    assert path is not None  # a chunk was written
    return path
