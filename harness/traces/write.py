"""Traces written back: the tidy form (CSV or Parquet) and Mooncake's JSONL, each checked
first (harness/traces/read.py's rules) and written whole or not at all
(fileio/atomic.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Dict

import numpy as np

from fileio.atomic import atomic_open

from .read import (
    COLUMNS,
    MAX_HASH_BLOCK,
    PARQUET_KEY,
    TraceError,
    block_size_ok,
    check_trace,
    show,
)


def write_tidy(df, path, *, hash_block_size=None) -> None:
    """Write arrival_s,prompt_len,max_new_tokens[,hash_ids] as CSV, or Parquet for .parquet/.pq.
    Parquet keeps the hash block size in its metadata; a CSV needs it again on reading.
    Both writers write whole files or none (fileio/atomic.py: WriteFailed on an OSError)."""
    path = Path(path)
    check_trace(df, str(path))
    block = hash_block_size or df.attrs.get("hash_block_size")
    hashes = "hash_ids" in df.columns
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow as pa
        import pyarrow.parquet as pq
        arrays = {"arrival_s": pa.array(df.arrival_s.to_numpy(dtype=float)),
                  "prompt_len": pa.array(df.prompt_len.to_numpy(dtype=np.int64)),
                  "max_new_tokens": pa.array(df.max_new_tokens.to_numpy(dtype=np.int64))}
        if hashes:
            arrays["hash_ids"] = pa.array([list(h) for h in df.hash_ids], type=pa.list_(pa.int64()))
        meta = {PARQUET_KEY: str(block).encode()} if hashes and block else None
        with atomic_open(path, "wb") as f:
            pq.write_table(pa.table(arrays, metadata=meta), f)
        return
    with atomic_open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS + (("hash_ids",) if hashes else ()))
        cols = [df.arrival_s.to_numpy(dtype=float), df.prompt_len.to_numpy(dtype=np.int64),
                df.max_new_tokens.to_numpy(dtype=np.int64)]
        for i, (a, p, o) in enumerate(zip(*cols)):
            extra = (json.dumps([int(h) for h in df.hash_ids.iat[i]]),) if hashes else ()
            w.writerow((repr(float(a)), int(p), int(o)) + extra)


def write_mooncake(df, path, *, hash_block_size=None) -> None:
    """Write Mooncake JSONL: timestamp in whole ms (as Mooncake's are, so rounded to 1 ms),
    input_length, output_length, and hash_ids. Without hash_ids in df, hash_block_size asks
    for fresh ids, none shared (no prefix reuse): ceil(prompt_len / hash_block_size) per
    request. Mooncake tools assume 512-token blocks: read other block sizes back with
    read_trace(..., hash_block_size=N)."""
    check_trace(df, str(path))
    known = df.attrs.get("hash_block_size")
    if "hash_ids" in df.columns and hash_block_size and known and hash_block_size != known:
        raise TraceError(f"{path}: hash_block_size={hash_block_size}, but the trace's hash_ids "
                         f"name {known}-token blocks")
    if hash_block_size is not None and not block_size_ok(hash_block_size):
        raise TraceError(f"hash_block_size: expected an integer in 1 .. {MAX_HASH_BLOCK}, got "
                         f"{hash_block_size!r}")
    with np.errstate(over="ignore"):
        ms = df.arrival_s.to_numpy(dtype=float) * 1000
    beyond = np.flatnonzero(~np.isfinite(ms))
    if len(beyond):
        i = beyond[0]
        raise TraceError(f"{path}: row {i + 1}: arrival_s: {show(df.arrival_s.iat[i])} is too "
                         f"large for a timestamp in ms: at most "
                         f"{np.finfo(float).max / 1000:.4g} s")
    next_id = 0
    with atomic_open(path) as f:
        for i, (t, p, o) in enumerate(zip(ms, df.prompt_len, df.max_new_tokens)):
            rec: Dict[str, object] = {"timestamp": int(round(float(t))),
                                      "input_length": int(p), "output_length": int(o)}
            if "hash_ids" in df.columns:
                rec["hash_ids"] = [int(h) for h in df.hash_ids.iat[i]]
            elif hash_block_size:
                k = -(-int(p) // hash_block_size)
                rec["hash_ids"], next_id = list(range(next_id, next_id + k)), next_id + k
            f.write(json.dumps(rec) + "\n")
