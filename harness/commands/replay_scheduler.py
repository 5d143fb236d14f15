"""steptrace replay-scheduler [TRACE]: a trace's arrivals through the C++ scheduler and the
Python reference side by side; exit 1 unless both planned identically and every request
finished or was rejected."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Dict

import numpy as np

from engine.block_hashes import block_size_mismatch
from engine.config import SchedulerConfig

from ..errors import BadInput
from ..replay.sched_replay import ReplayResult, replay
from ..traces.read import read_trace
from ..workload.overrides import parse_set
from .common import add_json, add_set, print_json

# The bundled trace, relative to the repository root (where the documented commands run).
DEFAULT_TRACE = Path("workloads") / "traces" / "synthetic_small.csv"
# Where replay-scheduler's SchedulerConfig starts, before --set.
DEFAULTS = dict(max_num_batched_tokens=2048, max_num_seqs=64, num_kv_blocks=2048)


def add(p) -> None:
    p.add_argument("trace", nargs="?", type=Path,
                   help="a trace in any readable format (default: the bundled "
                        f"{DEFAULT_TRACE}, from the repository root)")
    p.add_argument("--step-ms", type=float, default=20.0,
                   help="virtual duration of one engine step (default 20)")
    add_set(p, "num_kv_blocks=512 (a SchedulerConfig field)")
    add_json(p)
    p.set_defaults(handler=main)


def config(assignments) -> SchedulerConfig:
    """DEFAULTS with --set FIELD=VALUE applied, FIELD a SchedulerConfig field."""
    names = [f.name for f in dataclasses.fields(SchedulerConfig)]
    values: Dict[str, Any] = dict(DEFAULTS)  # YAML values: SchedulerConfig checks them
    for item in assignments:
        parts, value = parse_set(item)
        if len(parts) != 1 or parts[0] not in names:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(names)}")
        values[parts[0]] = value
    return SchedulerConfig(**values)


def main(args) -> int:
    try:
        cfg = config(args.set)
        if not math.isfinite(args.step_ms) or args.step_ms <= 0:
            raise ValueError(f"--step-ms must be a finite number > 0, got {args.step_ms:g}")
        if args.trace is None and not DEFAULT_TRACE.is_file():
            raise ValueError(f"no trace given, and the bundled {DEFAULT_TRACE} is not under the "
                             f"current directory: run from the repository root or name a trace")
        path = args.trace or DEFAULT_TRACE
        trace = read_trace(path).df
        mismatch = block_size_mismatch(trace.attrs.get("hash_block_size") or cfg.block_size,
                                       cfg.block_size)
        if mismatch:
            raise ValueError(f"{path}: {mismatch}")
    except (OSError, ValueError) as e:
        raise BadInput(e) from None
    step_s = args.step_ms / 1e3
    cpp, ref = replay(trace, cfg, step_s, "cpp"), replay(trace, cfg, step_s, "reference")
    same = cpp.plans == ref.plans
    result = dict(trace=path, requests=len(trace), span_s=float(trace["arrival_s"].iloc[-1]),
                  step_ms=args.step_ms, config=dataclasses.asdict(cfg), cpp=_stats(cpp),
                  reference=_stats(ref), plans_identical=same,
                  speedup=float(np.median(ref.call_ns) / np.median(cpp.call_ns)))
    if args.json:
        print_json(result)
    else:
        _print(path, result, cfg)
    return 0 if same and cpp.finished + cpp.rejected == len(trace) else 1


def _stats(r: ReplayResult) -> dict:
    us = np.array(r.call_ns) / 1e3
    return dict(steps=r.steps, prompt_rounds=r.prompt_rounds, preemptions=r.preemptions,
                finished=r.finished, rejected=r.rejected,
                schedule_p50_us=float(np.median(us)), schedule_p99_us=float(np.percentile(us, 99)))


def _print(path: Path, result: dict, cfg: SchedulerConfig) -> None:
    cpp, ref = result["cpp"], result["reference"]
    print(f"steptrace replay-scheduler: {path.name}, {result['requests']} requests over "
          f"{result['span_s']:.1f} s, one step = {result['step_ms']:g} ms")
    print(f"config: budget {cfg.max_num_batched_tokens} tokens, max_num_seqs "
          f"{cfg.max_num_seqs}, {cfg.num_kv_blocks} KV blocks x {cfg.block_size}, "
          f"engine {cfg.engine_type}, overlap {cfg.overlap}, num_mtp {cfg.num_mtp}")
    both = (cpp, ref)
    rows = [("steps (prompt rounds)", *(f"{r['steps']} ({r['prompt_rounds']})" for r in both)),
            ("preemptions", cpp["preemptions"], ref["preemptions"]),
            ("finished / rejected", *(f"{r['finished']} / {r['rejected']}" for r in both)),
            ("schedule() p50 us", f"{cpp['schedule_p50_us']:.1f}", f"{ref['schedule_p50_us']:.1f}"),
            ("schedule() p99 us", f"{cpp['schedule_p99_us']:.1f}", f"{ref['schedule_p99_us']:.1f}")]
    print(f"{'':24}{'C++':>14}{'reference':>14}")
    for name, a, b in rows:
        print(f"{name:24}{a!s:>14}{b!s:>14}")
    print(f"plans identical: {'yes' if result['plans_identical'] else 'NO'}; C++ is "
          f"{result['speedup']:.0f}x faster per schedule() call (median)")
