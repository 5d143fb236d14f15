"""A result table read back, Parquet or CSV alike: found in its folder (name.parquet, else
name.csv), only the columns asked for read, each checked against its declared kind
(harness/schema). Every reader of a run's, a search's or a sweep's tables reads through
here; errors name the file, and a bad value its column, row and value.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Collection, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fileio.regular import not_regular

from ..errors import BadInput
from ..schema import TABLES
from .table_sink import FORMATS


def table_file(folder: Path, name: str) -> Optional[Path]:
    """A table's file in a run's or a search's folder, in FORMATS' order (name.parquet, else
    name.csv); None when neither is there."""
    for fmt in FORMATS:
        path = Path(folder) / f"{name}.{fmt}"
        if path.exists():
            return path
    return None


def table_path(folder: Path, name: str) -> Path:
    """The table's file; BadInput naming the folder where it has none, naming the file
    where it is not a regular one (check_regular)."""
    path = table_file(folder, name)
    if path is None:
        raise BadInput(f"{folder}: no {name} table ({name}.parquet or {name}.csv)")
    check_regular(path)
    return path


def read_frame(path: Path, columns: Optional[Sequence[str]] = None,
               where: Optional[Tuple[str, object]] = None) -> pd.DataFrame:
    """The file's rows, only `columns` (all when None), only those whose column `where[0]`
    holds `where[1]` (a Parquet file's filtered as it is read); OSError or ValueError as
    the file's reader raises them."""
    path = Path(path)
    cols = None if columns is None else list(columns)
    if path.suffix == ".parquet":
        return pq.read_table(path, columns=cols, filters=None if where is None else
                             [(where[0], "==", where[1])]).to_pandas()
    if where is None:
        return pd.read_csv(path, usecols=cols)
    column, value = where
    use = None if cols is None else list(dict.fromkeys([*cols, column]))
    frame = pd.read_csv(path, usecols=use)
    frame = frame[_as_declared(path.stem, frame[column]) == value].reset_index(drop=True)
    return frame if cols is None or column in cols else frame.drop(columns=[column])


def _as_declared(table: str, column: pd.Series) -> pd.Series:
    """A CSV column's values as the schema declares them for `table` (text as text, numbers
    as numbers), so that it compares as the Parquet file's column does; as read where the
    schema declares no type."""
    declared = {c.name: c.type for c in TABLES[table].columns} if table in TABLES else {}
    kind = kind_of(declared[column.name]) if column.name in declared else None
    if kind == "text":
        return column.astype(str)
    return pd.to_numeric(column, errors="coerce") if kind in ("integer", "number") else column


def read_table(path: Path, name: str, columns: Optional[Sequence[str]] = None,
               where: Optional[Tuple[str, object]] = None,
               nullable: Collection[str] = ()) -> pd.DataFrame:
    """The table `name` in `path` (read_frame). BadInput naming the file when it or a column
    is missing or unreadable, or a column the schema declares numbers or flags holds
    anything else (check_values)."""
    path = Path(path)
    check_regular(path)
    try:
        if path.suffix == ".parquet" and columns is not None:
            present = pq.read_schema(path).names
            missing = [c for c in columns if c not in present]
            if missing:
                raise BadInput(f"{path}: no column(s) {', '.join(missing)}")
        frame = read_frame(path, columns, where)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e})") from None
    check_values(path, name, frame, nullable)
    return frame


def table_columns(path: Path) -> List[str]:
    """The column names of a table's file, read from its header; BadInput naming the file
    when it is unreadable (truncated, empty)."""
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            return list(pq.read_schema(path).names)
        return list(pd.read_csv(path, nrows=0).columns)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e})") from None


def read_requests(path: Path, columns: Optional[Sequence[str]] = None,
                  ordered: bool = True) -> pd.DataFrame:
    """The requests table (Parquet or CSV), in request_id order unless `ordered` is False
    (the recorder writes its rows as requests leave the scheduler). Text columns read as
    categoricals; Parquet is read a batch at a time into the frame's own arrays, so reading
    a million-request table back costs its columns once, not three times."""
    path = Path(path)
    cols = None if columns is None else list(dict.fromkeys(["request_id", *columns]))
    text = [c for c in ("status", "reason") if cols is None or c in cols]
    if path.suffix == ".parquet":
        frame = _read_parquet_columns(path, cols, text)
    else:
        frame = pd.read_csv(path, usecols=cols, dtype=dict.fromkeys(text, "category"))
    return frame.sort_values("request_id", kind="stable", ignore_index=True) if ordered \
        else frame


def _read_parquet_columns(path: Path, cols, text) -> pd.DataFrame:
    """A row group at a time into arrays of the table's length: memory is the frame plus
    one row group (text as categorical codes)."""
    table = pq.ParquetFile(path, read_dictionary=text)
    n = table.metadata.num_rows
    if n == 0:
        return table.read(columns=cols).to_pandas()
    names = cols or [f.name for f in table.schema_arrow]
    categories: Dict[str, Dict[str, int]] = {}  # each text column: value -> its code
    out, at = {}, 0
    for group in range(table.num_row_groups):
        part = table.read_row_group(group, columns=names)
        rows = part.num_rows
        for name in names:
            column = part.column(name).combine_chunks()
            if pa.types.is_dictionary(column.type):
                codes = categories.setdefault(name, {})
                here = np.array([codes.setdefault(v, len(codes))
                                 for v in column.dictionary.to_pylist()], np.int32)
                values = here[column.indices.to_numpy(zero_copy_only=False)]
            else:
                values = column.to_numpy(zero_copy_only=False)
            if name not in out:
                out[name] = np.empty(n, values.dtype)
            out[name][at:at + rows] = values
        at += rows
    for name, codes in categories.items():
        out[name] = pd.Categorical.from_codes(out[name], list(codes))
    return pd.DataFrame(out, copy=False)


def check_regular(path: Path) -> None:
    """BadInput naming what the path is where it is not a readable regular file: pyarrow
    would wait in open() on a FIFO for a writer, past SIGINT and SIGTERM."""
    why = not_regular(path)
    if why:
        raise BadInput(f"{path}: {why}")


def check_values(path: Path, table: str, frame: pd.DataFrame,
                 nullable: Collection[str] = ()) -> None:
    """BadInput naming the file, the column, the row and the value where a column that
    harness/schema declares integers, numbers or flags holds anything else: text, a null
    flag, a fraction or NaN among integers (but in the `nullable` columns); or where a
    Parquet file's text column holds anything but text or nulls (a CSV's holds what pandas
    made of its cells). Where the dtype does not fit, the values decide: integers stored as
    floats pass, and so does a CSV's empty column (read as text)."""
    declared = {c.name: c.type for c in TABLES[table].columns} if table in TABLES else {}
    for name, kind in ((n, kind_of(declared[n])) for n in frame.columns if n in declared):
        column = frame[name]
        if kind is None or column.dtype.kind in _FITS[kind] or (
                kind == "text" and (path.suffix != ".parquet" or _all_text(column))):
            continue
        bad = np.array([not (_fits(v, kind) or (name in nullable and is_null(v)))
                        for v in column.to_numpy(object)], bool)
        if not bad.any():  # integers stored as floats, a CSV's empty column read as text
            continue
        row = int(np.argmax(bad))
        raise BadInput(f"{path}: column {name}, {where_in(path, row)}: expected "
                       f"{_EXPECTED[kind]}, got {shown(column.iloc[row])}")


def kind_of(type_: pa.DataType) -> Optional[str]:
    if pa.types.is_boolean(type_):
        return "flag"
    if pa.types.is_integer(type_):
        return "integer"
    if pa.types.is_floating(type_):
        return "number"
    return "text" if pa.types.is_string(type_) or pa.types.is_dictionary(type_) else None


# the dtype kinds that hold a declared kind whatever their values (text's: none, its object
# dtype holds anything); others are read value by value
_FITS = {"flag": "b", "integer": "iu", "number": "iuf", "text": ""}
_EXPECTED = {"flag": "true or false", "integer": "an integer", "number": "a number",
             "text": "text"}


def _all_text(column: pd.Series) -> bool:
    """Text or nulls only, told without a look at each value (a coded column's by its
    codes' names)."""
    values = column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) \
        else column
    return pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty")


def shown(value) -> str:
    return "no value (null)" if is_null(value) else repr(
        value.item() if isinstance(value, np.generic) else value)


def _fits(value, kind: str) -> bool:
    if kind == "text":
        return isinstance(value, str) or is_null(value)
    if isinstance(value, (bool, np.bool_)):
        return kind == "flag"
    if isinstance(value, (int, np.integer)):
        return kind != "flag"
    if isinstance(value, (float, np.floating)):
        return kind == "number" or (kind == "integer" and float(value).is_integer())
    return False


def where_in(path: Path, row: int) -> str:
    """A row as a trace error names it: a CSV's line (the header is line 1), a Parquet
    file's row from 1."""
    return f"line {row + 2}" if path.suffix == ".csv" else f"row {row + 1}"


def is_null(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))
