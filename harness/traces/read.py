"""Traces: readers for the public LLM request-trace formats (Azure, Mooncake/Bailian,
BurstGPT, Vidur, tidy CSV/Parquet), streamed a chunk at a time, every row checked, and a
validator (check_trace). Statistics and the `steptrace trace` commands:
harness/commands/trace.py. Writers: harness/traces/write.py. Generators:
harness.traces.generate.

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
              records carry Bailian's chat_id, else ms; pass time_unit to be sure. Both that
              and whether there are hash_ids are told from the first FIRST_CHUNK_BYTES.
    burstgpt  CSV Timestamp (s),Model,Request tokens,Response tokens,...
    vidur     CSV arrived_at (s),num_prefill_tokens,num_decode_tokens (other columns ignored)
    tidy      CSV or Parquet arrival_s,prompt_len,max_new_tokens[,hash_ids] (CSV: a JSON
              list); a file with the column's older name, output_len, reads too (not both)

Bad rows raise TraceError naming the file, the line (CSV/JSONL, 1-based, header = line 1)
or row (Parquet, 1-based), the column, the value and what was expected. With
drop_bad_rows=True they are dropped instead and counted in TraceResult.dropped under the
reasons in DROP_REASONS. BurstGPT's failed requests (Response tokens == 0) are always dropped
and counted as "failed_request". Never droppable: a missing column, arrivals out of order,
an unknown format, a file with no requests. Blank lines hold no request and are skipped.
A token count of 2**53 or more (the reader parses through float64, exact below 2**53, and
2**53 + 1 rounds to 2**53; past int64 it would wrap) or a number beyond a double is
"too_large", never wrapped or rounded. A number is ASCII digits: in CSV text, what float()
alone would also take ('٣', '１０', '1_000') is not a number, and in JSON or Parquet a string
is not one either. Where one of two would be read and the other ignored: a column read twice
(a CSV header or a Parquet schema naming it twice, a tidy header with both max_new_tokens and
output_len) is refused; a JSON record giving a key twice is a bad line ("malformed_line").

Files are read as a stream, a chunk of lines at a time (CHUNK_BYTES), so memory is a chunk
plus the rows kept; with `limit` reading stops at the limit-th kept row, and the rows after
it are neither read nor checked (the sha256 still covers the whole file). A path that is not
a regular file (a FIFO, a device, a directory) is refused by what it is, before it is opened.
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
from typing import Dict, Generic, List, Mapping, Optional, Tuple, TypeVar

import numpy as np
import pandas as pd

from fileio.regular import NotAFile, check_regular

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
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
DROP_REASONS = {
    "malformed_line": "a CSV line with the wrong number of fields, a JSONL line that is not a "
                      "JSON object or gives a key twice",
    "missing_value": "an empty field, a JSON null or a missing key",
    "not_a_number": "a value that is not a finite number",
    "not_an_integer": "a token count with a fractional part",
    "negative": "a negative arrival time or token count",
    "zero_length": "a prompt or output of 0 tokens",
    "bad_timestamp": "an Azure TIMESTAMP that is not an ISO date-time in the file's style",
    "bad_hash_ids": "hash_ids that are not a list of integers in 0 .. 2**63 - 1",
    "too_many_hash_ids": "more hash_ids than the prompt has hash blocks",
    "too_large": "a token count of 2**53 or more, or a number beyond a double",
}
MAX_COUNT = 2 ** 53 - 1  # counts are read through float64: 2**53 may be a rounded 2**53 + 1
MAX_HASH_ID = 2 ** 63 - 1  # the engine's hash ids are int64
MAX_HASH_BLOCK = 2 ** 30  # tokens per hash id: beyond any sequence (engine.MAX_SEQ_TOKENS)
CHUNK_BYTES = 1 << 20  # text read and checked at a time: memory is a chunk plus the rows kept
FIRST_CHUNK_BYTES = 1 << 16  # the first chunk: what a JSONL trace's keys and unit are told from
PARQUET_BATCH_ROWS = 1 << 16
_LITERAL = re.compile(r"\s*\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$",  # not inf
                      re.ASCII)
_ZONE = re.compile(r"(?:[+-][0-9][0-9]:?[0-9][0-9]|Z)$")
PARQUET_KEY = b"steptrace.hash_block_size"  # a tidy Parquet trace's hash block size


class TraceError(ValueError):
    """A trace that cannot be read or written as asked; the message says where and why."""


class _KeyTwice(ValueError):
    """A JSON object giving a key twice (json.loads would keep the last)."""


def _object(pairs):
    obj = dict(pairs)
    if len(obj) < len(pairs):
        keys = [k for k, _ in pairs]
        raise _KeyTwice(next(k for i, k in enumerate(keys) if k in keys[:i]))
    return obj


_JSON = json.JSONDecoder(object_pairs_hook=_object)


@dataclass
class TraceResult:
    df: pd.DataFrame
    source: str                      # one of FORMATS
    path: Path
    dropped: dict = field(default_factory=dict)   # reason -> rows dropped
    hash_block_size: int | None = None            # tokens per hash id; None without hashes
    time_unit: str | None = None                  # mooncake only: "ms" or "s"
    sha256: str = ""
    # a session trace's: each turn's place in the file (FILE:LINE), by (session, turn)
    places: Mapping[Tuple[int, int], str] = field(default_factory=dict)

    def manifest(self) -> dict:
        return dict(path=str(self.path), format=self.source, sha256=self.sha256,
                    requests=len(self.df), dropped=dict(self.dropped),
                    hash_block_size=self.hash_block_size, time_unit=self.time_unit)


V = TypeVar("V")  # a column's values: a float64 array, or a list of lists for hash_ids


@dataclass
class _Col(Generic[V]):
    name: str            # as the source spells it
    raw: np.ndarray      # object: the values as read, for messages
    values: V
    reason: np.ndarray   # str: "" where the value is good, else a DROP_REASONS key
    expected: str
    maximum: str = ""    # the largest value read, for a too_large message


# ---------------------------------------------------------------- reading

def read_trace(path, format="auto", *, hash_block_size=None, drop_bad_rows=False,
               time_unit="auto", limit=None) -> TraceResult:
    """Read a trace file into a TraceResult; see the module docstring for formats and errors."""
    path = Path(path)
    if format not in ("auto",) + FORMATS:
        raise TraceError(f"unknown trace format {format!r}: expected auto or one of {', '.join(FORMATS)}")
    if time_unit not in ("auto", "ms", "s"):
        raise TraceError(f"time_unit: expected auto, ms or s, got {time_unit!r}")
    if hash_block_size is not None and not block_size_ok(hash_block_size):
        raise TraceError(f"hash_block_size: expected an integer in 1 .. {MAX_HASH_BLOCK}, got "
                         f"{hash_block_size!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise TraceError(f"limit: expected an integer >= 1 or None, got {limit!r}")
    try:
        check_regular(path)
    except NotAFile as e:
        raise TraceError(str(e)) from None
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        if format not in ("auto", "tidy"):
            raise TraceError(f"{path}: a Parquet file is read as a tidy trace, not {format}")
        res = _read_parquet(path, drop_bad_rows, hash_block_size, limit)
        with open(path, "rb") as f:
            res.sha256 = _Text(path, f).sha256()
        return res
    with open(path, "rb") as f:
        text = _Text(path, f)
        jsonl = suffix in (".jsonl", ".json") or text.head().lstrip()[:1] in (b"{", b"[")
        if format == "mooncake" or (format == "auto" and jsonl):
            res = _read_jsonl(text, drop_bad_rows, hash_block_size, time_unit, limit)
        else:
            res = _read_csv(text, format, drop_bad_rows, hash_block_size, limit)
        res.sha256 = text.sha256()
    return res


def block_size_ok(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and 1 <= v <= MAX_HASH_BLOCK


class _Text:
    """A text file, a chunk of whole lines (about CHUNK_BYTES) at a time, and the sha256 of
    all of it: when a reader stops early, the rest is hashed without being decoded."""

    def __init__(self, path, f):
        self.path, self._f, self._hash = path, f, hashlib.sha256()
        self._buf, self._eof = b"", False

    def _read(self) -> None:
        block = self._f.read(CHUNK_BYTES)
        self._hash.update(block)
        self._buf += block
        self._eof = not block

    def head(self) -> bytes:
        """The first bytes (a chunk's worth), for telling the format."""
        if not self._buf and not self._eof:
            self._read()
        return self._buf

    def chunks(self):
        """(number of the first line, the lines) for each chunk, in order; line numbers are
        those of str.splitlines over the whole text. Chunks grow from FIRST_CHUNK_BYTES to
        CHUNK_BYTES: a limit of a few rows reads little."""
        line, first, size = 1, True, FIRST_CHUNK_BYTES
        while self._buf or not self._eof:
            if len(self._buf) < size and not self._eof:
                self._read()
                continue
            cut = self._buf.rfind(b"\n", 0, size) + 1 or self._buf.find(b"\n", size) + 1
            if not cut and not self._eof:  # a line longer than the buffer: read on
                self._read()
                continue
            end = cut or len(self._buf)  # the end of the file ends the last line
            data, self._buf = self._buf[:end], self._buf[end:]
            rows = self._decode(data, line, first).splitlines()
            first, size = False, min(2 * size, CHUNK_BYTES)
            yield line, rows
            line += len(rows)

    def _decode(self, data: bytes, line: int, first: bool) -> str:
        try:
            return data.decode("utf-8-sig" if first else "utf-8")
        except UnicodeDecodeError as e:
            line += data[:e.start].count(b"\n")
            raise TraceError(f"{self.path}:{line}: expected UTF-8 text, got the byte "
                             f"{data[e.start]:#04x}") from None

    def sha256(self) -> str:
        self._buf = b""
        while not self._eof:
            block = self._f.read(1 << 20)
            self._hash.update(block)
            self._eof = not block
        return self._hash.hexdigest()


def _read_csv(text, fmt, drop, block, limit):
    path, rows_kept = text.path, None
    azure: Dict[str, object] = {}  # _azure_times' state across chunks
    for line, rows in text.chunks():
        if rows_kept is None:  # the first chunk starts with the header
            if not rows or not rows[0].strip():
                raise TraceError(f"{path}:1: expected a header line, got a blank line")
            header = [h.strip() for h in next(csv.reader(rows[:1]))]
            fmt, names = _csv_columns(path, fmt, header)
            if "hash_ids" in names and block is None:
                raise TraceError(f"{path}: hash_ids present but a CSV does not say its hash "
                                 f"block size: pass hash_block_size")
            rows_kept = _Rows(path, "line", drop, limit, block)
            rows, line = rows[1:], line + 1
        if not rows:
            continue
        lines, ok, problems, raw = _csv_body(rows, line, header, names)
        a, p, o = names[:3]
        arrival = _azure_times(a, raw[a], azure) if fmt == "azure" else \
            _numbers(a, raw[a], False, "a number of seconds >= 0", from_text=True)
        cols: List[_Col] = [arrival, _numbers(p, raw[p], True, from_text=True),
                            _numbers(o, raw[o], True, from_text=True)]
        if "hash_ids" in names:
            cols.append(_hash_ids(raw["hash_ids"], from_text=True))
        # a BurstGPT failed request has no response, whatever else the row says
        always = {"failed_request": ok & (cols[2].values == 0)} if fmt == "burstgpt" else {}
        if rows_kept.add(lines, cols, problems, always):
            break
    if rows_kept is None:
        raise TraceError(f"{path}:1: expected a header line, got an empty file")
    return rows_kept.result(fmt, block)


def _csv_columns(path, fmt, header):
    """The format (told from the header for auto) and the columns to read, as spelled."""
    if fmt == "auto":
        fmt = max(CSV_COLUMNS, key=lambda f: sum(c in header for c in CSV_COLUMNS[f]))
        if not set(CSV_COLUMNS[fmt]) & set(header):
            raise TraceError(f"{path}:1: cannot tell the trace format from the header {','.join(header)}: "
                             + "; ".join(f"{f} has {','.join(c)}" for f, c in CSV_COLUMNS.items())
                             + "; mooncake is JSONL")
    names = list(CSV_COLUMNS[fmt]) + (["hash_ids"] if fmt == "tidy" and "hash_ids" in header else [])
    if fmt == "tidy":
        names = _tidy_names(names, header)
    twice = _read_twice(header, names, fmt == "tidy")
    if twice:
        raise TraceError(f"{path}:1: {fmt} trace: {twice}")
    missing = [c for c in names if c not in header]
    if missing:
        raise TraceError(f"{path}:1: {fmt} trace: missing column(s) {', '.join(missing)}; "
                         f"the header is {','.join(header)}")
    return fmt, names


def _csv_body(rows, first_line, header, names):
    """Line numbers, well-formed flags, problems and the named columns' strings of a chunk's
    lines. A regular chunk (no quotes, no blank lines, every line as wide as the header) takes
    pandas' C parser."""
    width, where = len(header), [header.index(c) for c in names]
    text = "\n".join(rows)
    if '"' not in text and all(r.count(",") == width - 1 for r in rows):
        table = pd.read_csv(io.StringIO(text), header=None, usecols=where, dtype=object,
                            na_filter=False)
        if len(table) == len(rows):
            n = len(table)
            return (np.arange(first_line, first_line + n), np.ones(n, dtype=bool), {},
                    {c: table[i].to_numpy(dtype=object) for c, i in zip(names, where)})
    parsed = list(csv.reader(rows))
    at = [k for k, r in enumerate(parsed) if len(r) > 1 or (r and r[0].strip())]
    lines = np.array(at, dtype=int) + first_line
    body = [parsed[k] for k in at]
    ok = np.array([len(r) == width for r in body], dtype=bool)
    problems = {i: f"expected {width} comma-separated fields ({','.join(header)}), got {len(body[i])}"
                for i in np.flatnonzero(~ok)}
    raw = {c: np.array([r[i] if k else "" for r, k in zip(body, ok)] + [None], dtype=object)[:-1]
           for c, i in zip(names, where)}
    return lines, ok, problems, raw


def _read_jsonl(text, drop, block, unit, limit):
    """Mooncake JSONL. The first chunk's records (FIRST_CHUNK_BYTES) decide which keys there
    are (hash_ids or not) and, with unit auto, the time unit: the same whatever the limit."""
    path, rows_kept, hashes = text.path, None, False
    for line, rows in text.chunks():
        records, lines, problems = _json_records(rows, line)
        if not records:
            continue
        if rows_kept is None:
            hashes, unit = _json_keys(path, records, lines, problems, unit)
            if hashes:
                block = block or (MOONCAKE_BLOCK if unit == "ms" else BAILIAN_BLOCK)
            rows_kept = _Rows(path, "line", drop, limit, block if hashes else None)
        raw = {k: np.array([r.get(k) for r in records] + [None], dtype=object)[:-1]
               for k in MOONCAKE_KEYS + ("hash_ids",) * hashes}
        stamp = _numbers("timestamp", raw["timestamp"], False, f"a number >= 0 (in {unit})",
                         from_text=False)
        if unit == "ms":
            stamp.values = stamp.values / 1000.0
        cols: List[_Col] = [
            stamp, _numbers("input_length", raw["input_length"], True, from_text=False),
            _numbers("output_length", raw["output_length"], True, from_text=False)]
        if hashes:
            cols.append(_hash_ids(raw["hash_ids"], from_text=False))
        if rows_kept.add(np.array(lines, dtype=int), cols, problems, {}):
            break
    if rows_kept is None:
        raise TraceError(f"{path}: no requests")
    res = rows_kept.result("mooncake", block if hashes else None)
    res.time_unit = unit
    return res


def _json_records(rows, line):
    """A chunk's records ({} for a bad line), their line numbers, and what is wrong with
    each bad one (by index)."""
    records: List[dict] = []
    lines: List[int] = []
    problems: Dict[int, str] = {}
    for k, row in enumerate(rows):
        if not row.strip():
            continue
        rec, why = _json_record(row)
        if why:
            problems[len(records)] = why
        records.append(rec if isinstance(rec, dict) else {})
        lines.append(line + k)
    return records, lines, problems


def _json_record(row: str):
    """(the line's JSON object, None) or (None, why it is not one)."""
    try:
        rec = _JSON.decode(row)
    except json.JSONDecodeError as e:
        return None, f"expected a JSON object, got invalid JSON ({e.msg} at column {e.colno})"
    except _KeyTwice as e:
        return None, f"expected a JSON object, got one giving the key {show(e.args[0])} twice"
    except ValueError as e:  # an integer of more than 4300 digits
        return None, f"expected a JSON object, got a number too long to read ({e})"
    except RecursionError:
        return None, "expected a JSON object, got JSON nested too deeply"
    if not isinstance(rec, dict):
        return None, f"expected a JSON object, got a JSON {type(rec).__name__}"
    return rec, None


def _json_keys(path, records, lines, problems, unit):
    """(whether the trace has hash_ids, its time unit), told from the first chunk."""
    missing = [k for k in MOONCAKE_KEYS if not any(k in r for r in records)]
    if missing and problems:  # say what is wrong with the first line, not what it lacks
        first = min(problems)
        raise TraceError(f"{path}:{lines[first]}: {problems[first]}")
    if missing:
        raise TraceError(f"{path}: mooncake trace: no record has the key(s) "
                         f"{', '.join(missing)}")
    if unit == "auto":
        frac = any(type(r.get("timestamp")) is float and math.isfinite(r["timestamp"])
                   and not r["timestamp"].is_integer() for r in records)
        unit = "s" if frac or any("chat_id" in r for r in records) else "ms"
    return any("hash_ids" in r for r in records), unit


def _read_parquet(path, drop, block, limit):
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
        meta = pf.schema_arrow.metadata or {}
        if block is None and PARQUET_KEY in meta:
            block = int(meta[PARQUET_KEY])
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: not a readable Parquet file ({e})") from e
    if block is not None and not block_size_ok(block):
        raise TraceError(f"{path}: the metadata's {PARQUET_KEY.decode()}: expected an integer "
                         f"in 1 .. {MAX_HASH_BLOCK}, got {block}")
    names = _frame_names(pf.schema_arrow.names, path, old_names=True)
    if "hash_ids" in names and block is None:
        raise TraceError(f"{path}: hash_ids present but the hash block size is unknown: "
                         f"pass hash_block_size")
    rows_kept, row = _Rows(path, "row", drop, limit, block), 1
    batches = pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=names)
    while True:
        try:
            frame = next(batches).to_pandas()
        except StopIteration:
            break
        except (OSError, ValueError) as e:
            raise TraceError(f"{path}: not a readable Parquet file ({e})") from e
        if rows_kept.add(np.arange(row, row + len(frame)), _frame_cols(frame, names), {}, {}):
            break
        row += len(frame)
    return rows_kept.result("tidy", block)


def _tidy_names(names, header):
    """The tidy columns as a file spells them: an old name where only it is present."""
    return [OLD_TIDY_NAMES[c] if c in OLD_TIDY_NAMES and c not in header
            and OLD_TIDY_NAMES[c] in header else c for c in names]


def _read_twice(columns, names, old_names) -> str:
    """What would be read from one of two columns, the other ignored: a column named twice,
    or (old_names) a tidy column under both its names; "" for neither."""
    columns = list(columns)

    def at(*cs):
        *rest, last = [str(i + 1) for i, c in enumerate(columns) if c in cs]
        return f"columns {', '.join(rest)} and {last}"
    ignored = "one would be read, the other ignored; keep one"
    for c in names:
        n = columns.count(c)
        if n > 1:
            return f"{c} is named {'twice' if n == 2 else f'{n} times'} ({at(c)}): {ignored}"
    for new, old in OLD_TIDY_NAMES.items():
        if old_names and new in columns and old in columns:
            return f"both {new} and its older name {old} ({at(new, old)}): {ignored}"
    return ""


def _frame_names(columns, label, old_names=False):
    names = list(COLUMNS) + (["hash_ids"] if "hash_ids" in columns else [])
    if old_names:
        names = _tidy_names(names, list(columns))
    missing = [c for c in names if c not in columns]
    if missing:
        raise TraceError(f"{label}: missing column(s) {', '.join(missing)}; the columns are "
                         f"{', '.join(map(str, columns))}")
    twice = _read_twice(columns, names, old_names)
    if twice:
        raise TraceError(f"{label}: {twice}")
    return names


def _frame_cols(frame, names):
    raw = {c: frame[c].to_numpy() for c in names}  # numeric columns stay numeric: fast
    a, p, o = names[:3]
    cols: List[_Col] = [
        _numbers(a, raw[a], False, "a number of seconds >= 0", from_text=False),
        _numbers(p, raw[p], True, from_text=False), _numbers(o, raw[o], True, from_text=False)]
    if "hash_ids" in names:
        cols.append(_hash_ids(raw["hash_ids"], from_text=False))
    return cols


def _numbers(name, raw, integer, expected="an integer >= 1", *, from_text) -> _Col[np.ndarray]:
    """Parse CSV text (from_text) or JSON/Parquet values (None, NaN and NA are missing; a bool
    or a string is bad). Too large: a token count above MAX_COUNT, or a literal beyond what a
    double holds."""
    vals, missing = np.full(len(raw), np.nan), np.zeros(len(raw), dtype=bool)
    huge = np.zeros(len(raw), dtype=bool)
    if raw.dtype.kind in "fiu":  # a Parquet column
        vals = raw.astype(float)
        missing = np.isnan(vals)
    elif from_text:  # a CSV column of strings: fast
        try:
            vals = raw.astype(float)
        except ValueError:
            vals = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
        vals = np.where(_plain_ascii(raw), vals, np.nan)
        blank = np.flatnonzero(np.isnan(vals))
        missing[blank] = [not raw[i].strip() for i in blank]
        inf = np.flatnonzero(np.isinf(vals))
        huge[inf] = [bool(_LITERAL.match(raw[i])) for i in inf]
    else:
        for i, v in enumerate(raw):
            if v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and math.isnan(v)):
                missing[i] = True
            elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                try:
                    vals[i] = float(v)
                except OverflowError:  # a JSON integer beyond a double
                    vals[i], huge[i] = (math.inf, True) if v > 0 else (-math.inf, False)
    with np.errstate(invalid="ignore"):
        too_large = huge | (integer & np.isfinite(vals) & (vals > MAX_COUNT))
        reason = np.select(
            [missing, too_large, ~np.isfinite(vals), integer & (vals != np.floor(vals)),
             vals < 0, integer & (vals == 0)],
            ["missing_value", "too_large", "not_a_number", "not_an_integer", "negative",
             "zero_length"], "")
    maximum = f"2**53 - 1 = {MAX_COUNT}" if integer else f"{np.finfo(float).max:.4g}"
    return _Col(name, raw, vals, reason.astype(object), expected, maximum)


def _plain_ascii(raw) -> np.ndarray:
    """Where float() reads only what a number is: ASCII without "_" (float() also takes
    Unicode digits, '٣' or '１０', and '1_000')."""
    joined = "".join(raw)
    if joined.isascii() and "_" not in joined:
        return np.ones(len(raw), dtype=bool)
    return np.array([s.isascii() and "_" not in s for s in raw], dtype=bool)


def _azure_times(name, raw, state) -> _Col[np.ndarray]:
    """Seconds after the file's first good TIMESTAMP; `state` carries that time and the
    file's style (with a zone or without, from its first value) from chunk to chunk."""
    text = pd.Series(raw, dtype="str").str.strip()
    empty = text.eq("").to_numpy(dtype=bool)
    zoned = text.str.contains(_ZONE.pattern, regex=True).to_numpy(dtype=bool)
    if "style" not in state and (~empty).any():
        state["style"] = bool(zoned[np.flatnonzero(~empty)[0]])
    style = state.get("style", False)
    times = pd.to_datetime(text.where(zoned == style, ""), format="ISO8601", errors="coerce", utc=style)
    good = times.notna().to_numpy()
    vals = np.full(len(raw), np.nan)
    if good.any():
        t0 = state.setdefault("t0", times[good].iloc[0])
        vals[good] = ((times[good] - t0) / pd.Timedelta(seconds=1)).to_numpy()
    reason = np.where(empty, "missing_value", np.where(good, "", "bad_timestamp")).astype(object)
    like = "2024-05-10 00:00:00.0000000+00:00" if style else "2023-11-16 18:17:03.9799600"
    return _Col(name, raw, vals, reason, f"a date-time like {like}")


def _hash_ids(raw, from_text) -> _Col[List[Optional[list]]]:
    vals: List[Optional[list]] = []
    reason = []
    for v in raw:
        if from_text and isinstance(v, str):
            try:
                v = json.loads(v) if v.strip() else None
            except (ValueError, RecursionError):
                v = "bad"
        if isinstance(v, np.ndarray):
            v = v.tolist()
        ok = isinstance(v, list) and all(type(h) is int and 0 <= h <= MAX_HASH_ID for h in v)
        vals.append(v if ok else None)
        reason.append("" if ok else "missing_value" if v is None else "bad_hash_ids")
    return _Col("hash_ids", raw, vals, np.array(reason, dtype=object),
                "a list of integers in 0 .. 2**63 - 1")


def _hash_ids_fit(cols, block) -> None:
    """A prompt of P tokens has ceil(P / block) hash blocks: a row naming more is bad (the
    engine would refuse the request mid-run)."""
    prompt, hashes = cols[1], cols[3]
    for i, ids in enumerate(hashes.values):
        if ids is not None and prompt.reason[i] == "" and \
                len(ids) > -(-int(prompt.values[i]) // block):
            hashes.reason[i] = "too_many_hash_ids"


class _Rows:
    """A trace's rows, checked a chunk at a time, in order: a bad row is dropped and counted,
    or remembered and raised once the rest are counted; arrivals must not go back; reading
    stops once `limit` rows are kept. Only the kept rows' values stay in memory."""

    def __init__(self, path, kind, drop, limit, block=None):
        self.path, self.kind, self.drop, self.limit = path, kind, drop, limit
        self.block = block  # tokens per hash id, where the rows have them
        self.parts, self.kept, self.dropped = [], 0, {}
        self.error, self.bad = None, 0  # the first bad row, and how many
        self.last = None  # (arrival, as read, where) of the last row kept

    def loc(self, where) -> str:
        return f"{self.path}:{where}" if self.kind == "line" else f"{self.path}: row {where}"

    def add(self, where, cols, problems, always) -> bool:
        """A chunk's rows (where: their lines or rows); True once `limit` rows are kept."""
        n = len(where)
        if len(cols) > 3:
            _hash_ids_fit(cols, self.block)
        reason, culprit = np.full(n, "", dtype=object), np.full(n, -1)
        reason[list(problems)] = "malformed_line"
        for j, c in enumerate(cols):
            new = (reason == "") & (c.reason != "")
            reason[new], culprit[new] = c.reason[new], j
        skip = np.zeros(n, dtype=bool)
        for mask in always.values():
            skip |= mask
        bad = ~skip & (reason != "")
        good = ~skip & ~bad
        stop = n  # rows past the limit-th good one are not read
        if self.limit is not None:
            at = np.flatnonzero(good)
            if len(at) >= self.limit - self.kept:
                stop = at[self.limit - self.kept - 1] + 1
        bad[stop:] = good[stop:] = False
        for r, mask in always.items():
            if mask[:stop].any():
                self.dropped[r] = self.dropped.get(r, 0) + int(mask[:stop].sum())
        if bad.any() and not self.drop:
            if self.error is None:
                i = np.flatnonzero(bad)[0]
                what = _what(cols, culprit[i], reason[i], problems, i, self.block)
                self.error = f"{self.loc(where[i])}: {what}"
            self.bad += int(bad.sum())
        elif bad.any():
            for r in DROP_REASONS:
                count = int((bad & (reason == r)).sum())
                if count:
                    self.dropped[r] = self.dropped.get(r, 0) + count
        idx = np.flatnonzero(good)
        self.kept += len(idx)
        if self.error is None and len(idx):
            self._check_order(where, cols[0], idx)
            self.parts.append((cols[0].values[idx], cols[1].values[idx].astype(np.int64),
                               cols[2].values[idx].astype(np.int64),
                               [cols[3].values[i] for i in idx] if len(cols) > 3 else None))
        return self.limit is not None and self.kept >= self.limit

    def _check_order(self, where, col, idx) -> None:
        arrival = col.values[idx]
        before = [] if self.last is None else [self.last[0]]
        back = np.flatnonzero(np.diff(np.concatenate((before, arrival))) < 0)
        if len(back):
            k = back[0] - len(before)  # arrival[k + 1] is earlier than the row before it
            i = idx[k + 1]
            if k < 0:  # earlier than the last row kept, of the chunk before
                assert self.last is not None
                prev = self.last[1:]
            else:
                prev = (col.raw[idx[k]], where[idx[k]])
            raise TraceError(f"{self.loc(where[i])}: {col.name}: {show(col.raw[i])} is earlier "
                             f"than {show(prev[0])} at {self.kind} {prev[1]}: a trace must be "
                             f"sorted by arrival time")
        self.last = (arrival[-1], col.raw[idx[-1]], where[idx[-1]])

    def result(self, fmt, block) -> TraceResult:
        if self.error:
            more = (f"{self.bad} bad row{'s' * (self.bad > 1)} in all; drop_bad_rows=True drops "
                    f"and counts them")
            raise TraceError(f"{self.error} ({more})")
        if not self.kept:
            raise TraceError(f"{self.path}: no requests"
                             + (f" left after dropping {self.dropped}" if self.dropped else ""))
        arrivals, prompts, outputs, hashes = (list(c) for c in zip(*self.parts))
        self.parts = []  # each column is joined, then its parts let go: the rows once, not twice
        arrival = np.concatenate(arrivals)
        del arrivals
        arrival -= arrival[0]
        prompt = np.concatenate(prompts)
        del prompts
        df = pd.DataFrame({"arrival_s": arrival, "prompt_len": prompt,
                           "max_new_tokens": np.concatenate(outputs)}, copy=False)
        if hashes[0] is not None:
            df["hash_ids"] = pd.Series([h for part in hashes for h in part], dtype=object)
            df.attrs["hash_block_size"] = block
        return TraceResult(df, fmt, Path(self.path), self.dropped,
                           block if hashes[0] is not None else None)


def _what(cols, culprit, reason, problems, i, block) -> str:
    """What is wrong with row i of a chunk: its column, what was expected and the value."""
    if culprit < 0:
        return problems[i]
    c = cols[culprit]
    if reason == "too_many_hash_ids":
        prompt = int(cols[1].values[i])
        return (f"{c.name}: {len(c.values[i])} ids, but a {prompt}-token prompt has at most "
                f"{-(-prompt // block)} hash blocks of {block} tokens")
    if reason == "too_large":
        return (f"{c.name}: {show(c.raw[i])} is too large: expected {c.expected}, at most "
                f"{c.maximum}")
    return f"{c.name}: expected {c.expected}, got {show(c.raw[i])}"


def show(v):
    """A value as read, for a message; a long one cut short, with its length."""
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def check_trace(df, label="trace") -> None:
    """Raise TraceError (naming the 1-based row) unless df is a valid trace frame."""
    if not isinstance(df, pd.DataFrame):
        raise TraceError(f"{label}: expected a pandas DataFrame, got {type(df).__name__}")
    names = _frame_names(df.columns, label)
    rows = _Rows(label, "row", False, None, df.attrs.get("hash_block_size", 1))
    rows.add(np.arange(1, len(df) + 1), _frame_cols(df, names), {}, {})
    rows.result("tidy", df.attrs.get("hash_block_size", 1))
