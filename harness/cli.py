"""The steptrace command line. Exit codes: 0 ok, 1 the run failed, 2 bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import engine
from engine import SchedulerConfig

from . import run_commands
from .trace_cli import add_trace_commands, run_trace_command
from .sched_replay import replay
from .traces import read_trace

# The bundled trace, relative to the repository root (where the README's commands run).
DEFAULT_TRACE = Path("workloads") / "traces" / "synthetic_small.csv"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="steptrace", description="Trace-driven benchmarking harness for a DeepSeek-style "
                                      "LLM inference engine.")
    parser.add_argument("--version", action="version", version=f"steptrace {engine.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("replay-scheduler", help="replay a trace's arrivals through the C++ "
                         "scheduler and the Python reference, side by side")
    rep.add_argument("trace", nargs="?", type=Path,
                     help="a trace in any readable format (default: the bundled "
                          f"{DEFAULT_TRACE}, from the repository root)")
    rep.add_argument("--step-ms", type=float, default=20.0,
                     help="virtual duration of one engine step (default 20)")
    rep.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="a SchedulerConfig field, e.g. --set num_kv_blocks=2048")
    run = sub.add_parser("run", help="replay a workload into the engine, write its tables")
    run.add_argument("workload", type=Path)
    run.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                     help="override a workload key, e.g. --set engine.num_mtp=1")
    check = sub.add_parser("validate", help="check a workload without running it")
    check.add_argument("workload", type=Path)
    check.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    show = sub.add_parser("show", help="print a run's summary table")
    show.add_argument("run_dir", type=Path)
    add_trace_commands(sub)
    args = parser.parse_args(argv)
    if args.command in ("run", "validate", "show"):
        return run_commands.main(args)
    if args.command == "trace":
        return run_trace_command(args)
    try:
        config = _config(args.set)
        if args.step_ms <= 0:
            raise ValueError(f"--step-ms must be > 0, got {args.step_ms:g}")
        if args.trace is None and not DEFAULT_TRACE.is_file():
            raise ValueError(f"no trace given, and the bundled {DEFAULT_TRACE} is not under the "
                             f"current directory: run from the repository root or name a trace")
        path = args.trace or DEFAULT_TRACE
        trace = read_trace(path).df
    except (OSError, ValueError) as e:
        print(f"steptrace: error: {e}", file=sys.stderr)
        return 2
    return _replay_scheduler(path, trace, config, args.step_ms / 1e3)


def _config(assignments) -> SchedulerConfig:
    fields = dict(max_num_batched_tokens=2048, max_num_seqs=64, num_kv_blocks=2048)
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or name not in SchedulerConfig.__dataclass_fields__:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(SchedulerConfig.__dataclass_fields__)}")
        fields[name] = _parse(value)
    return SchedulerConfig(**fields)


def _parse(value: str):
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value.lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        return value


def _replay_scheduler(path, trace, config, step_s) -> int:
    cpp = replay(trace, config, step_s, "cpp")
    ref = replay(trace, config, step_s, "reference")
    same = cpp.plans == ref.plans
    us = {k: np.array(r.call_ns) / 1e3 for k, r in (("cpp", cpp), ("ref", ref))}
    print(f"steptrace replay-scheduler: {path.name}, {len(trace)} requests over "
          f"{trace['arrival_s'].iloc[-1]:.1f} s, one step = {step_s * 1e3:g} ms")
    print(f"config: budget {config.max_num_batched_tokens} tokens, max_num_seqs "
          f"{config.max_num_seqs}, {config.num_kv_blocks} KV blocks x {config.block_size}, "
          f"engine {config.engine_type}, overlap {config.overlap}, num_mtp {config.num_mtp}")
    rows = [
        ("steps (prompt rounds)", f"{cpp.steps} ({cpp.prompt_rounds})",
         f"{ref.steps} ({ref.prompt_rounds})"),
        ("preemptions", cpp.preemptions, ref.preemptions),
        ("finished / rejected", f"{cpp.finished} / {cpp.rejected}", f"{ref.finished} / {ref.rejected}"),
        ("schedule() p50 us", f"{np.median(us['cpp']):.1f}", f"{np.median(us['ref']):.1f}"),
        ("schedule() p99 us", f"{np.percentile(us['cpp'], 99):.1f}",
         f"{np.percentile(us['ref'], 99):.1f}"),
    ]
    print(f"{'':24}{'C++':>14}{'reference':>14}")
    for name, a, b in rows:
        print(f"{name:24}{a!s:>14}{b!s:>14}")
    speedup = np.median(us["ref"]) / np.median(us["cpp"])
    print(f"plans identical: {'yes' if same else 'NO'}; C++ is {speedup:.0f}x faster per "
          f"schedule() call (median)")
    return 0 if same and cpp.finished + cpp.rejected == len(trace) else 1


if __name__ == "__main__":
    sys.exit(main())
