"""`steptrace trace convert` and `steptrace trace stats`, and the statistics they print.
harness.cli wires them in: add_trace_commands(subparsers), then run_trace_command(args)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from .traces import (FORMATS, MOONCAKE_BLOCK, check_trace, read_trace, write_mooncake,
                     write_tidy)


def trace_stats(df) -> dict:
    """Requests, span, mean rate ((n - 1) / span), inter-arrival CV, and length percentiles."""
    check_trace(df)
    a = df.arrival_s.to_numpy(dtype=float)
    span, gaps = float(a[-1] - a[0]), np.diff(a)
    out = dict(requests=len(df), duration_s=span,
               mean_rate=(len(df) - 1) / span if span > 0 else float("nan"),
               interarrival_cv=float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else float("nan"))
    for col in ("prompt_len", "max_new_tokens"):
        v = df[col].to_numpy()
        out[col] = dict(mean=float(v.mean()), p50=float(np.percentile(v, 50)),
                        p90=float(np.percentile(v, 90)), p99=float(np.percentile(v, 99)),
                        min=int(v.min()), max=int(v.max()))
    return out


def add_trace_commands(subparsers) -> None:
    """Add `trace convert` and `trace stats` to a steptrace subparsers object."""
    trace = subparsers.add_parser("trace", help="read, convert and summarise request traces")
    sub = trace.add_subparsers(dest="trace_command", required=True)
    conv = sub.add_parser("convert", help="convert a trace to tidy CSV/Parquet or Mooncake JSONL")
    conv.add_argument("src", type=Path)
    conv.add_argument("dst", type=Path)
    conv.add_argument("--to", choices=("tidy", "mooncake"),
                      help="output format (default: mooncake for .jsonl, else tidy)")
    stats = sub.add_parser("stats", help="print a trace's size, rate and length percentiles")
    stats.add_argument("file", type=Path)
    for p in (conv, stats):
        p.add_argument("--format", default="auto", choices=("auto",) + FORMATS,
                       help="input format (default: from the extension and header)")
        p.add_argument("--drop-bad-rows", action="store_true",
                       help="drop and count bad rows instead of stopping at the first")
        p.add_argument("--hash-block-size", type=int, help="tokens per hash id in the input")
        p.add_argument("--time-unit", default="auto", choices=("auto", "ms", "s"),
                       help="mooncake timestamps: ms (Mooncake) or s (Bailian)")


def run_trace_command(args) -> int:
    """Run `steptrace trace ...`: 0 ok, 2 bad input (with 'steptrace: error: ...' on stderr)."""
    try:
        src = args.src if args.trace_command == "convert" else args.file
        res = read_trace(src, args.format, hash_block_size=args.hash_block_size,
                         drop_bad_rows=args.drop_bad_rows, time_unit=args.time_unit)
        dropped = ", ".join(f"{k} {v}" for k, v in res.dropped.items()) or "none"
        if args.trace_command == "convert":
            to = args.to or ("mooncake" if args.dst.suffix.lower() in (".jsonl", ".json") else "tidy")
            (write_mooncake if to == "mooncake" else write_tidy)(res.df, args.dst)
            print(f"steptrace trace convert: {len(res.df)} requests from {src} ({res.source}) "
                  f"to {args.dst} ({to}); dropped: {dropped}")
            if to == "mooncake" and res.hash_block_size not in (None, MOONCAKE_BLOCK):
                print(f"note: hash_ids name {res.hash_block_size}-token blocks, not Mooncake's "
                      f"{MOONCAKE_BLOCK}: read back with --hash-block-size {res.hash_block_size}")
            return 0
        s = trace_stats(res.df)
    except (OSError, ValueError) as e:
        print(f"steptrace: error: {e}", file=sys.stderr)
        return 2
    print(f"steptrace trace stats: {src} ({res.source}"
          + (f", timestamps in {res.time_unit}" if res.time_unit else "") + ")")
    rows = [("requests", s["requests"]), ("duration_s", f"{s['duration_s']:.2f}"),
            ("mean rate (req/s)", f"{s['mean_rate']:.3f}"),
            ("inter-arrival CV", f"{s['interarrival_cv']:.3f}"), ("dropped rows", dropped)]
    if res.hash_block_size:
        rows.append(("hash block (tokens)", res.hash_block_size))
    for name, value in rows:
        print(f"{name:20}{value}")
    keys = ("mean", "p50", "p90", "p99", "min", "max")
    print(f"{'':14}" + "".join(f"{k:>9}" for k in keys))
    for col in ("prompt_len", "max_new_tokens"):
        print(f"{col:14}" + "".join(f"{s[col][k]:>9d}" if k in ("min", "max") else
                                    f"{s[col][k]:>9.1f}" for k in keys))
    return 0
