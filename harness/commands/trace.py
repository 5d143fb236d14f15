"""steptrace trace convert | stats: read, convert and summarise request traces."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

import numpy as np

from engine.block_hashes import block_size_mismatch
from fileio.atomic import NotAnOutputFile, WriteFailed, check_output

from ..errors import BadInput, RunFailed
from ..record.table_reader import read_requests, table_path
from ..traces.open_loop import recorded_arrivals
from ..traces.read import FORMATS, MOONCAKE_BLOCK, check_trace, read_trace
from ..traces.reuse import reuse_bound
from ..traces.session_readers import SESSION_FORMATS, read_session_file, session_format
from ..traces.session_stats import by_turn, gaps_by_kind
from ..traces.sessions import is_sessions
from ..traces.write import write_mooncake, write_tidy
from .common import add_json, print_json

LENGTHS = ("prompt_len", "max_new_tokens")
SESSION_BLOCK = 16  # tokens per chained hash id of a session trace without hash ids, by default


def add(trace) -> None:
    commands = trace.add_subparsers(dest="trace_command", required=True)
    conv = commands.add_parser("convert", help="convert a trace to tidy CSV/Parquet or "
                                               "Mooncake JSONL")
    conv.add_argument("src", type=Path)
    conv.add_argument("dst", type=Path)
    conv.add_argument("--to", choices=("tidy", "mooncake"),
                      help="output format (default: mooncake for .jsonl, else tidy)")
    conv.add_argument("--arrivals", type=Path, metavar="RUN",
                      help="a session trace: its turns as plain requests at the arrivals a "
                           "run of it recorded (its requests table)")
    conv.set_defaults(handler=convert)
    stats = commands.add_parser("stats", help="print a trace's size, rate and length percentiles")
    stats.add_argument("src", type=Path, metavar="file")
    stats.add_argument("--block-size", type=int,
                       help="the reuse bound at this engine block size (default: the hash block)")
    stats.set_defaults(handler=show_stats)
    for p in (conv, stats):
        p.add_argument("--format", default="auto", choices=("auto",) + FORMATS + SESSION_FORMATS,
                       help="input format (default: from the extension and header)")
        p.add_argument("--drop-bad-rows", action="store_true",
                       help="drop and count bad rows instead of stopping at the first")
        p.add_argument("--hash-block-size", type=int, help="tokens per hash id in the input")
        p.add_argument("--time-unit", default="auto", choices=("auto", "ms", "s"),
                       help="mooncake timestamps: ms (Mooncake) or s (Bailian)")
        add_json(p)


def trace_stats(df) -> dict:
    """Requests, span, mean rate ((n - 1) / span), inter-arrival CV, and length percentiles;
    of a session trace, the span, rate and CV of its sessions' starts."""
    check_trace(df)
    a = df.arrival_s[df["parent_row"] < 0] if is_sessions(df) else df.arrival_s
    a = a.to_numpy(dtype=float)
    span, gaps = float(a[-1] - a[0]), np.diff(a)
    out: Dict[str, object] = dict(
        requests=len(df), duration_s=span,
        mean_rate=(len(a) - 1) / span if span > 0 else float("nan"),
        interarrival_cv=float(gaps.std() / gaps.mean())
        if len(gaps) and gaps.mean() > 0 else float("nan"))
    for col in LENGTHS:
        v = df[col].to_numpy()
        out[col] = dict(mean=float(v.mean()), p50=float(np.percentile(v, 50)),
                        p90=float(np.percentile(v, 90)), p99=float(np.percentile(v, 99)),
                        min=int(v.min()), max=int(v.max()))
    return out


def session_stats(df) -> dict:
    """A session trace's sessions, turns per session, sub-agent turns and mean gap by kind
    (docs/workloads.md, "Sessions")."""
    turns = df.groupby("session_id").size()
    later = df[df["parent_row"] >= 0]
    return dict(sessions=len(turns), turns_mean=float(turns.mean()),
                turns_max=int(turns.max()),
                subagent_turns=int((df["gap_kind"] == "subagent").sum()),
                gap_s_mean={k: float(v) for k, v in
                            later.groupby("gap_kind", observed=True)["gap_s"].mean().items()})


def _read(args):
    try:
        fmt = args.format
        if fmt == "auto" and args.src.is_file():
            fmt = session_format(args.src) or fmt
        if fmt in SESSION_FORMATS:
            return read_session_file(args.src, fmt, args.hash_block_size,
                                     getattr(args, "block_size", None) or SESSION_BLOCK,
                                     args.time_unit)
        return read_trace(args.src, args.format, hash_block_size=args.hash_block_size,
                          drop_bad_rows=args.drop_bad_rows, time_unit=args.time_unit)
    except (OSError, ValueError) as e:
        raise BadInput(e) from None


def convert(args) -> int:
    if _same_file(args.src, args.dst):
        raise BadInput(f"{args.dst}: the output is the input file ({args.src}); converting "
                       "would overwrite the trace being read: write to another path")
    try:  # a device, a FIFO, a socket or a directory would be replaced by a plain file
        check_output(args.dst)
    except NotAnOutputFile as e:
        raise BadInput(f"{args.dst}: {e.strerror}; give the output file's path") from None
    res = _read(args)
    if is_sessions(res.df) != (args.arrivals is not None):
        raise BadInput(f"{args.src}: a session trace converts to no request trace: its turns' "
                       f"arrivals are known only as a replay runs (--arrivals RUN: a run's)"
                       if args.arrivals is None else
                       f"--arrivals: {args.src} is a request trace: its arrivals are its own")
    if args.arrivals is not None:
        res.df = _open_loop(res.df, args.arrivals)
    to = args.to or ("mooncake" if args.dst.suffix.lower() in (".jsonl", ".json") else "tidy")
    try:  # the output is written whole or not at all (fileio/atomic.py)
        (write_mooncake if to == "mooncake" else write_tidy)(res.df, args.dst)
    except WriteFailed as e:
        raise RunFailed(e) from None
    except ValueError as e:
        raise BadInput(e) from None
    note = None
    if to == "mooncake" and res.hash_block_size not in (None, MOONCAKE_BLOCK):
        note = (f"hash_ids name {res.hash_block_size}-token blocks, not Mooncake's "
                f"{MOONCAKE_BLOCK}: read back with --hash-block-size {res.hash_block_size}")
    if args.json:
        print_json(dict(src=args.src, source=res.source, dst=args.dst, to=to,
                        requests=len(res.df), dropped=res.dropped, note=note))
        return 0
    print(f"steptrace trace convert: {len(res.df)} requests from {args.src} ({res.source}) "
          f"to {args.dst} ({to}); dropped: {_dropped(res)}")
    if note:
        print(f"note: {note}")
    return 0


def _open_loop(df, run: Path):
    """The session trace's turns at the arrivals `run`'s requests table recorded."""
    try:
        rows = read_requests(table_path(run, "requests"), ("arrival_s", "prompt_len"))
        return recorded_arrivals(df, rows["arrival_s"].to_numpy(np.float64),
                                 rows["prompt_len"].to_numpy(np.int64))
    except (OSError, ValueError) as e:
        raise BadInput(f"--arrivals {run}: {e}") from None


def _same_file(src: Path, dst: Path) -> bool:
    """One file under both names: the same path, a symbolic or a hard link (device and
    inode compared). An output that does not exist yet is never the input."""
    try:
        return os.path.samefile(src, dst)
    except OSError:
        return False


def show_stats(args) -> int:
    res = _read(args)
    try:
        s = trace_stats(res.df)
    except ValueError as e:
        raise BadInput(e) from None
    if args.block_size is not None:
        if args.block_size < 1:
            raise BadInput(f"--block-size: expected an integer >= 1, got {args.block_size}")
        if not res.hash_block_size:
            raise BadInput(f"--block-size: {args.src} has no hash_ids, so no reuse bound")
        mismatch = block_size_mismatch(res.hash_block_size, args.block_size)
        if mismatch:
            raise BadInput(f"--block-size: {mismatch}")
    if res.hash_block_size:
        s["reuse"] = reuse_bound(res.df, res.hash_block_size, args.block_size)
    if is_sessions(res.df):
        s["sessions"] = session_stats(res.df)
        s["gap_s"] = gaps_by_kind(res.df)
        s["by_turn"] = by_turn(res.df, res.hash_block_size, args.block_size)
    if args.json:
        print_json(dict(file=args.src, source=res.source, time_unit=res.time_unit,
                        hash_block_size=res.hash_block_size, dropped=res.dropped, **s))
        return 0
    print(f"steptrace trace stats: {args.src} ({res.source}"
          + (f", timestamps in {res.time_unit}" if res.time_unit else "") + ")")
    rows = [("requests", s["requests"]), ("duration_s", f"{s['duration_s']:.2f}"),
            ("session rate (/s)" if "sessions" in s else "mean rate (req/s)",
             f"{s['mean_rate']:.3f}"),
            ("inter-arrival CV", f"{s['interarrival_cv']:.3f}"), ("dropped rows", _dropped(res))]
    if res.hash_block_size:
        r = s["reuse"]
        rows += [("hash block (tokens)", res.hash_block_size),
                 ("reuse bound", f"{r['reuse_bound']:.4f} ({r['reuse_tokens']} of "
                                 f"{r['prompt_tokens']} prompt tokens, {r['block_size']}-token "
                                 f"blocks)")]
    if "sessions" in s:
        rows += _session_rows(s)
    for name, value in rows:
        print(f"{name:20}{value}")
    keys = ("mean", "p50", "p90", "p99", "min", "max")
    print(f"{'':14}" + "".join(f"{k:>9}" for k in keys))
    for col in LENGTHS:
        print(f"{col:14}" + "".join(f"{s[col][k]:>9d}" if k in ("min", "max") else
                                    f"{s[col][k]:>9.1f}" for k in keys))
    if "by_turn" in s:
        _print_by_turn(s["by_turn"])
    return 0


def _session_rows(s: dict) -> list:
    t = s["sessions"]
    return [("sessions", t["sessions"]),
            ("turns per session", f"mean {t['turns_mean']:.2f}, max {t['turns_max']}"),
            ("sub-agent turns", t["subagent_turns"]),
            ("gap_s by kind", ", ".join(f"{k} {v:.3f}" for k, v in t["gap_s_mean"].items())
             + " (mean)")] + [
        (f"gap_s {kind}", f"n {g['count']}, p50 {g['p50']:.3f}, p90 {g['p90']:.3f}, "
                          f"max {g['max']:.3f}") for kind, g in s["gap_s"].items()]


def _print_by_turn(rows) -> None:
    """Context growth and reuse by turn index (harness/traces/session_stats.py)."""
    reuse = "reuse_bound" in rows[0]
    print(f"{'turn index':14}{'turns':>9}{'prompt mean':>13}{'prompt p50':>12}{'input mean':>12}"
          + (f"{'reuse bound':>13}" if reuse else ""))
    for r in rows:
        print(f"{r['turns']:14}{r['count']:>9d}{r['prompt_len_mean']:>13.1f}"
              f"{r['prompt_len_p50']:>12.1f}{r['input_tokens_mean']:>12.1f}"
              + (f"{r['reuse_bound']:>13.4f}" if reuse else ""))


def _dropped(res) -> str:
    return ", ".join(f"{k} {v}" for k, v in res.dropped.items()) or "none"
