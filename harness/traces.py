"""Traces: readers for the public LLM request-trace formats, a validator and writers.
Statistics and the `steptrace trace` commands: harness/commands/trace.py.
Generators: harness.arrivals.

A trace is a pandas DataFrame, one row per request, in arrival order:
    arrival_s   float64  seconds after the first request (the first is 0.0), non-decreasing
    prompt_len  int64    >= 1
    max_new_tokens  int64  >= 1, the output tokens the request asks for
    hash_ids    object   lists of ints, only when the source has them: id k names the k-th
                         block of df.attrs["hash_block_size"] prompt tokens, and equal ids
                         mean a shared prefix (Mooncake's convention)

Formats (format="auto" picks one from the extension and the header or first line):
    azure     CSV TIMESTAMP,ContextTokens,GeneratedTokens: ISO date-times, naive with 7
              fractional digits (2023) or with a +00:00 offset (2024); CRLF, no final newline
    mooncake  JSONL timestamp,input_length,output_length[,hash_ids]: Mooncake has timestamps
              in ms and 512-token blocks, Alibaba Bailian has seconds and 16-token blocks.
              time_unit="auto" takes seconds when a timestamp has a fractional part or the
              records carry Bailian's chat_id, else ms; pass time_unit to be sure.
    burstgpt  CSV Timestamp (s),Model,Request tokens,Response tokens,...
    vidur     CSV arrived_at (s),num_prefill_tokens,num_decode_tokens (other columns ignored)
    tidy      CSV or Parquet arrival_s,prompt_len,max_new_tokens[,hash_ids] (CSV: a JSON
              list); a file with the column's older name, output_len, reads too

Bad rows raise TraceError naming the file, the line (CSV/JSONL, 1-based, header = line 1)
or row (Parquet, 1-based), the column, the value and what was expected. With
drop_bad_rows=True they are dropped instead and counted in TraceResult.dropped under the
reasons in DROP_REASONS. BurstGPT's failed requests (Response tokens == 0) are always dropped
and counted as "failed_request". Never droppable: a missing column, arrivals out of order,
an unknown format, a file with no requests. Blank lines hold no request and are skipped.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .atomic import atomic_open

COLUMNS = ("arrival_s", "prompt_len", "max_new_tokens")
OLD_TIDY_NAMES = {"max_new_tokens": "output_len"}  # a tidy file may still use these
FORMATS = ("azure", "mooncake", "burstgpt", "vidur", "tidy")
CSV_COLUMNS = {  # format -> (arrival, prompt, output) column names
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
    "tidy": COLUMNS,
}
MOONCAKE_BLOCK, BAILIAN_BLOCK = 512, 16
DROP_REASONS = {
    "malformed_line": "a CSV line with the wrong number of fields, a JSONL line that is not a JSON object",
    "missing_value": "an empty field, a JSON null or a missing key",
    "not_a_number": "a value that is not a finite number",
    "not_an_integer": "a token count with a fractional part",
    "negative": "a negative arrival time or token count",
    "zero_length": "a prompt or output of 0 tokens",
    "bad_timestamp": "an Azure TIMESTAMP that is not an ISO date-time in the file's style",
    "bad_hash_ids": "hash_ids that are not a list of integers >= 0",
}
_ZONE = re.compile(r"(?:[+-]\d\d:?\d\d|Z)$")
_PARQUET_KEY = b"steptrace.hash_block_size"


class TraceError(ValueError):
    """A trace that cannot be read or written as asked; the message says where and why."""


@dataclass
class TraceResult:
    df: pd.DataFrame
    source: str                      # one of FORMATS
    path: Path
    dropped: dict = field(default_factory=dict)   # reason -> rows dropped
    hash_block_size: int | None = None            # tokens per hash id; None without hashes
    time_unit: str | None = None                  # mooncake only: "ms" or "s"
    sha256: str = ""

    def manifest(self) -> dict:
        return dict(path=str(self.path), format=self.source, sha256=self.sha256,
                    requests=len(self.df), dropped=dict(self.dropped),
                    hash_block_size=self.hash_block_size, time_unit=self.time_unit)


@dataclass
class _Col:
    name: str            # as the source spells it
    raw: np.ndarray      # object: the values as read, for messages
    values: object       # float64 array, or a list of lists for hash_ids
    reason: np.ndarray   # str: "" where the value is good, else a DROP_REASONS key
    expected: str


# ---------------------------------------------------------------- reading

def read_trace(path, format="auto", *, hash_block_size=None, drop_bad_rows=False,
               time_unit="auto") -> TraceResult:
    """Read a trace file into a TraceResult; see the module docstring for formats and errors."""
    path = Path(path)
    if format not in ("auto",) + FORMATS:
        raise TraceError(f"unknown trace format {format!r}: expected auto or one of {', '.join(FORMATS)}")
    if time_unit not in ("auto", "ms", "s"):
        raise TraceError(f"time_unit: expected auto, ms or s, got {time_unit!r}")
    if hash_block_size is not None and (not isinstance(hash_block_size, int) or hash_block_size < 1):
        raise TraceError(f"hash_block_size: expected an integer >= 1, got {hash_block_size!r}")
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        if format not in ("auto", "tidy"):
            raise TraceError(f"{path}: a Parquet file is read as a tidy trace, not {format}")
        res = _read_parquet(path, drop_bad_rows, hash_block_size)
    elif format == "mooncake" or (format == "auto" and (suffix in (".jsonl", ".json")
                                                        or data.lstrip()[:1] in (b"{", b"["))):
        res = _read_jsonl(path, data, drop_bad_rows, hash_block_size, time_unit)
    else:
        res = _read_csv(path, data, format, drop_bad_rows, hash_block_size)
    res.sha256 = hashlib.sha256(data).hexdigest()
    return res


def _read_csv(path, data, fmt, drop, block):
    text = _decode(path, data)
    rows = text.splitlines()
    if not rows or not rows[0].strip():
        raise TraceError(f"{path}:1: expected a header line, got {'a blank line' if rows else 'an empty file'}")
    header = [h.strip() for h in next(csv.reader(rows[:1]))]
    if fmt == "auto":
        fmt = max(CSV_COLUMNS, key=lambda f: sum(c in header for c in CSV_COLUMNS[f]))
        if not set(CSV_COLUMNS[fmt]) & set(header):
            raise TraceError(f"{path}:1: cannot tell the trace format from the header {','.join(header)}: "
                             + "; ".join(f"{f} has {','.join(c)}" for f, c in CSV_COLUMNS.items())
                             + "; mooncake is JSONL")
    names = list(CSV_COLUMNS[fmt]) + (["hash_ids"] if fmt == "tidy" and "hash_ids" in header else [])
    if fmt == "tidy":
        names = _tidy_names(names, header)
    missing = [c for c in names if c not in header]
    if missing:
        raise TraceError(f"{path}:1: {fmt} trace: missing column(s) {', '.join(missing)}; "
                         f"the header is {','.join(header)}")
    lines, ok, problems, raw = _csv_body(text, rows, header, names)
    a, p, o = names[:3]
    arrival = _azure_times(a, raw[a]) if fmt == "azure" else _numbers(a, raw[a], False, "a number of seconds >= 0")
    cols = [arrival, _numbers(p, raw[p], True), _numbers(o, raw[o], True)]
    always = {}
    if fmt == "burstgpt":  # a failed request has no response, whatever else the row says
        always["failed_request"] = ok & (cols[2].values == 0)
    if "hash_ids" in names:
        cols.append(_hash_ids(raw["hash_ids"], from_text=True))
        if block is None:
            raise TraceError(f"{path}: hash_ids present but a CSV does not say its hash block size: "
                             f"pass hash_block_size")
    return _finish(path, fmt, lines, "line", cols, problems, always, drop, block)


def _decode(path, data) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise TraceError(f"{path}:{line}: expected UTF-8 text, got the byte {data[e.start]:#04x}") from e


def _csv_body(text, rows, header, names):
    """Line numbers, well-formed flags, problems and the named columns' strings. A regular file
    (no quotes, no blank lines, every line as wide as the header) takes pandas' C parser."""
    width, where = len(header), [header.index(c) for c in names]
    if len(rows) > 1 and '"' not in text and all(r.count(",") == width - 1 for r in rows[1:]):
        table = pd.read_csv(io.StringIO(text), header=None, skiprows=1, usecols=where,
                            dtype=object, na_filter=False)
        if len(table) == len(rows) - 1:
            n = len(table)
            return (np.arange(2, n + 2), np.ones(n, dtype=bool), {},
                    {c: table[i].to_numpy(dtype=object) for c, i in zip(names, where)})
    parsed = list(csv.reader(rows))
    lines = np.array([i for i, r in enumerate(parsed, 1) if i > 1 and (len(r) > 1 or (r and r[0].strip()))],
                     dtype=int)
    body = [parsed[i - 1] for i in lines]
    ok = np.array([len(r) == width for r in body], dtype=bool)
    problems = {i: f"expected {width} comma-separated fields ({','.join(header)}), got {len(body[i])}"
                for i in np.flatnonzero(~ok)}
    raw = {c: np.array([r[i] if k else "" for r, k in zip(body, ok)] + [None], dtype=object)[:-1]
           for c, i in zip(names, where)}
    return lines, ok, problems, raw


def _read_jsonl(path, data, drop, block, unit):
    records, lines, problems = [], [], {}
    for lineno, text in enumerate(_decode(path, data).splitlines(), 1):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
            why = None if isinstance(rec, dict) else f"expected a JSON object, got a JSON {type(rec).__name__}"
        except ValueError as e:
            rec, why = None, f"expected a JSON object, got invalid JSON ({e.msg} at column {e.colno})"
        if why:
            problems[len(records)] = why
        records.append(rec if isinstance(rec, dict) else {})
        lines.append(lineno)
    if not records:
        raise TraceError(f"{path}: no requests")
    names = ("timestamp", "input_length", "output_length")
    missing = [k for k in names if not any(k in r for r in records)]
    if missing:
        raise TraceError(f"{path}: mooncake trace: no record has the key(s) {', '.join(missing)}")
    raw = {k: np.array([r.get(k) for r in records] + [None], dtype=object)[:-1]
           for k in names + ("hash_ids",)}
    if unit == "auto":
        frac = any(type(v) is float and math.isfinite(v) and not v.is_integer()
                   for v in raw["timestamp"])
        unit = "s" if frac or any("chat_id" in r for r in records) else "ms"
    stamp = _numbers("timestamp", raw["timestamp"], False, f"a number >= 0 (in {unit})")
    if unit == "ms":
        stamp.values = stamp.values / 1000.0
    cols = [stamp, _numbers("input_length", raw["input_length"], True),
            _numbers("output_length", raw["output_length"], True)]
    if any("hash_ids" in r for r in records):
        cols.append(_hash_ids(raw["hash_ids"], from_text=False))
        block = block or (MOONCAKE_BLOCK if unit == "ms" else BAILIAN_BLOCK)
    res = _finish(path, "mooncake", np.array(lines, dtype=int), "line", cols, problems, {}, drop, block)
    res.time_unit = unit
    return res


def _read_parquet(path, drop, block):
    import pyarrow.parquet as pq
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: not a readable Parquet file ({e})") from e
    meta = table.schema.metadata or {}
    if block is None and _PARQUET_KEY in meta:
        block = int(meta[_PARQUET_KEY])
    return _from_frame(table.to_pandas(), path, "row", drop, block, old_names=True)


def _tidy_names(names, header):
    """The tidy columns as a file spells them: an old name where only it is present."""
    return [OLD_TIDY_NAMES[c] if c in OLD_TIDY_NAMES and c not in header
            and OLD_TIDY_NAMES[c] in header else c for c in names]


def _from_frame(frame, label, kind, drop, block, old_names=False):
    names = list(COLUMNS) + (["hash_ids"] if "hash_ids" in frame.columns else [])
    if old_names:
        names = _tidy_names(names, list(frame.columns))
    missing = [c for c in names if c not in frame.columns]
    if missing:
        raise TraceError(f"{label}: missing column(s) {', '.join(missing)}; the columns are "
                         f"{', '.join(map(str, frame.columns))}")
    raw = {c: frame[c].to_numpy() for c in names}  # numeric columns stay numeric: fast
    a, p, o = names[:3]
    cols = [_numbers(a, raw[a], False, "a number of seconds >= 0"),
            _numbers(p, raw[p], True), _numbers(o, raw[o], True)]
    if "hash_ids" in names:
        cols.append(_hash_ids(raw["hash_ids"], from_text=False))
        if block is None:
            raise TraceError(f"{label}: hash_ids present but the hash block size is unknown: "
                             f"pass hash_block_size")
    where = np.arange(1, len(frame) + 1)
    return _finish(Path(str(label)), "tidy", where, kind, cols, {}, {}, drop, block)


def _numbers(name, raw, integer, expected="an integer >= 1") -> _Col:
    """Parse CSV text or JSON/Parquet values (None, NaN and NA are missing; a bool is bad)."""
    vals, missing = np.full(len(raw), np.nan), np.zeros(len(raw), dtype=bool)
    if raw.dtype.kind in "fiu":  # a Parquet column
        vals = raw.astype(float)
        missing = np.isnan(vals)
    elif pd.api.types.infer_dtype(raw, skipna=False) == "string":  # a CSV column: fast
        try:
            vals = raw.astype(float)
        except ValueError:
            vals = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
        blank = np.flatnonzero(np.isnan(vals))
        missing[blank] = [not raw[i].strip() for i in blank]
    else:
        for i, v in enumerate(raw):
            if v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and math.isnan(v)):
                missing[i] = True
            elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                vals[i] = float(v)
            elif isinstance(v, str):
                missing[i] = not v.strip()
                vals[i] = pd.to_numeric(v.strip(), errors="coerce") if v.strip() else np.nan
    with np.errstate(invalid="ignore"):
        reason = np.select(
            [missing, ~np.isfinite(vals), integer & (vals != np.floor(vals)), vals < 0,
             integer & (vals == 0)],
            ["missing_value", "not_a_number", "not_an_integer", "negative", "zero_length"], "")
    return _Col(name, raw, vals, reason.astype(object), expected)


def _azure_times(name, raw) -> _Col:
    text = pd.Series(raw, dtype="str").str.strip()
    empty = text.eq("").to_numpy(dtype=bool)
    zoned = text.str.contains(_ZONE.pattern, regex=True).to_numpy(dtype=bool)
    style = bool(zoned[np.flatnonzero(~empty)[0]]) if (~empty).any() else False
    times = pd.to_datetime(text.where(zoned == style, ""), format="ISO8601", errors="coerce", utc=style)
    good = times.notna().to_numpy()
    vals = np.full(len(raw), np.nan)
    if good.any():
        vals[good] = ((times[good] - times[good].iloc[0]) / pd.Timedelta(seconds=1)).to_numpy()
    reason = np.where(empty, "missing_value", np.where(good, "", "bad_timestamp")).astype(object)
    like = "2024-05-10 00:00:00.0000000+00:00" if style else "2023-11-16 18:17:03.9799600"
    return _Col(name, raw, vals, reason, f"a date-time like {like}")


def _hash_ids(raw, from_text) -> _Col:
    vals, reason = [], []
    for v in raw:
        if from_text and isinstance(v, str):
            try:
                v = json.loads(v) if v.strip() else None
            except ValueError:
                v = "bad"
        if isinstance(v, np.ndarray):
            v = v.tolist()
        ok = isinstance(v, list) and all(type(h) is int and h >= 0 for h in v)
        vals.append(v if ok else None)
        reason.append("" if ok else "missing_value" if v is None else "bad_hash_ids")
    return _Col("hash_ids", raw, vals, np.array(reason, dtype=object), "a list of integers >= 0")


def _finish(path, fmt, where, kind, cols, problems, always, drop, block) -> TraceResult:
    """Check every row, drop or raise, check the order, and build the frame."""
    n = len(where)
    loc = (lambda i: f"{path}:{where[i]}") if kind == "line" else (lambda i: f"{path}: row {where[i]}")
    dropped, keep = {}, np.ones(n, dtype=bool)
    for reason, mask in always.items():
        if mask.any():
            dropped[reason] = int(mask.sum())
        keep &= ~mask
    reason = np.full(n, "", dtype=object)
    reason[list(problems)] = "malformed_line"
    culprit = np.full(n, -1)
    for j, c in enumerate(cols):
        new = (reason == "") & (c.reason != "")
        reason[new], culprit[new] = c.reason[new], j
    bad = keep & (reason != "")
    if bad.any() and not drop:
        i, count = np.flatnonzero(bad)[0], int(bad.sum())
        c = cols[culprit[i]] if culprit[i] >= 0 else None
        what = (f"{c.name}: expected {c.expected}, got {_show(c.raw[i])}" if c else problems[i])
        more = f"{count} bad row{'s' * (count > 1)} in all; drop_bad_rows=True drops and counts them"
        raise TraceError(f"{loc(i)}: {what} ({more})")
    for r in DROP_REASONS:
        if (bad & (reason == r)).any():
            dropped[r] = int((bad & (reason == r)).sum())
    keep &= ~bad
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        raise TraceError(f"{path}: no requests" + (f" left after dropping {dropped}" if dropped else ""))
    arrival = cols[0].values[idx]
    back = np.flatnonzero(np.diff(arrival) < 0)
    if len(back):
        i, prev = idx[back[0] + 1], idx[back[0]]
        raise TraceError(f"{loc(i)}: {cols[0].name}: {_show(cols[0].raw[i])} is earlier than "
                         f"{_show(cols[0].raw[prev])} at {kind} {where[prev]}: a trace must be "
                         f"sorted by arrival time")
    df = pd.DataFrame({"arrival_s": arrival - arrival[0],
                       "prompt_len": cols[1].values[idx].astype(np.int64),
                       "max_new_tokens": cols[2].values[idx].astype(np.int64)})
    if len(cols) > 3:
        df["hash_ids"] = pd.Series([cols[3].values[i] for i in idx], dtype=object)
        df.attrs["hash_block_size"] = block
    return TraceResult(df, fmt, Path(path), dropped, block if len(cols) > 3 else None)


def _show(v):
    return repr(v.item() if isinstance(v, np.generic) else v)


def check_trace(df, label="trace") -> None:
    """Raise TraceError (naming the 1-based row) unless df is a valid trace frame."""
    if not isinstance(df, pd.DataFrame):
        raise TraceError(f"{label}: expected a pandas DataFrame, got {type(df).__name__}")
    _from_frame(df, label, "row", False, df.attrs.get("hash_block_size", 1))


# ---------------------------------------------------------------- writing

def write_tidy(df, path, *, hash_block_size=None) -> None:
    """Write arrival_s,prompt_len,max_new_tokens[,hash_ids] as CSV, or Parquet for .parquet/.pq.
    Parquet keeps the hash block size in its metadata; a CSV needs it again on reading.
    Both writers write whole files or none (harness/atomic.py: WriteFailed on an OSError)."""
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
        meta = {_PARQUET_KEY: str(block).encode()} if hashes and block else None
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
    if hash_block_size is not None and (not isinstance(hash_block_size, int) or hash_block_size < 1):
        raise TraceError(f"hash_block_size: expected an integer >= 1, got {hash_block_size!r}")
    next_id = 0
    with atomic_open(path) as f:
        for i, (a, p, o) in enumerate(zip(df.arrival_s, df.prompt_len, df.max_new_tokens)):
            rec = {"timestamp": int(round(a * 1000)), "input_length": int(p), "output_length": int(o)}
            if "hash_ids" in df.columns:
                rec["hash_ids"] = [int(h) for h in df.hash_ids.iat[i]]
            elif hash_block_size:
                k = -(-int(p) // hash_block_size)
                rec["hash_ids"], next_id = list(range(next_id, next_id + k)), next_id + k
            f.write(json.dumps(rec) + "\n")
