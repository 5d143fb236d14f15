"""Reading the requests table back, and manifest.json
(docs/metrics.md defines every column; the recorder streams the steps, batches and
requests tables).

The manifest is written to a temporary name and renamed into place, as every table is; it
says `complete: false` until the run ended cleanly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .atomic import atomic_open


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
    out, categories, at = {}, {}, 0
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


def write_manifest(manifest: dict, run_dir: Path) -> None:
    with atomic_open(Path(run_dir) / "manifest.json") as f:
        f.write(json.dumps(manifest, indent=2, default=str) + "\n")
