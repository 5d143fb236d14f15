"""steptrace compare A... -- B... | --by KEY RUNS...: two arms of runs, metric by metric,
with bootstrap intervals over runs and a verdict (docs/comparing.md)."""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import asdict

from ..errors import BadInput
from ..record.busy_host import note
from ..schema.summary import TEXT_STATS
from .common import add_json, print_json

ARM_B = "--arm-b"


def add(p) -> None:
    p.description = ("Compare arm B against arm A: `compare A... -- B...` (run folders, globs or "
                     "folders of runs), or `compare --by KEY RUNS...` (a label: gil_mode, "
                     "overlap, device; or a workload key).")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folders, globs or folders holding runs; `--` between the arms")
    p.add_argument("--by", metavar="KEY", help="split the runs into two arms by this label "
                   "(gil_mode, overlap, device, repeat) or workload key (engine.num_mtp)")
    p.add_argument("--allow-different", action="store_true",
                   help="compare runs of different traces (their trace_sha256 differ)")
    p.add_argument("--include-incomplete", action="store_true",
                   help="keep runs that did not complete (killed, interrupted, failed)")
    p.add_argument("--drop-busy", action="store_true",
                   help="leave out runs whose host was busy with other work")
    p.add_argument(ARM_B, nargs="*", help=argparse.SUPPRESS)  # what `--` split off
    add_json(p)
    p.add_argument("--csv", action="store_true", help="print the metric rows as CSV")
    p.set_defaults(handler=main)


def split_arms(argv: list) -> list:
    """`compare A... -- B...` with the `--` made an option: argparse would drop it (and
    refuse an option after it), so B's runs are what follows it up to the next option."""
    if "compare" not in argv or "--" not in argv[argv.index("compare"):]:
        return argv
    at = argv.index("--", argv.index("compare"))
    return argv[:at] + [ARM_B] + argv[at + 1:]


def main(args) -> int:
    from ..analysis.compare import compare

    a, b = _arms(args)
    result = compare(a, b, allow_different=args.allow_different,
                     include_incomplete=args.include_incomplete, drop_busy=args.drop_busy)
    if args.json:
        print_json(result.to_dict())
    elif args.csv:
        _print_csv(result)
    else:
        print_text(result)
    return 0


def _arms(args):
    from ..analysis.compare import Arm, arms_by
    from ..analysis.runs import load_runs

    if args.by:
        if args.arm_b is not None:
            raise BadInput("compare: give either `A... -- B...` or --by KEY, not both")
        return arms_by(load_runs(args.runs), args.by)
    if args.arm_b is None:
        raise BadInput("compare: two arms needed: `compare A... -- B...` or "
                       "`compare --by KEY RUNS...`")
    if not args.arm_b:
        raise BadInput("compare: an arm is empty: `compare A... -- B...` needs runs on "
                       "both sides of `--`")
    return Arm("A", tuple(load_runs(args.runs))), Arm("B", tuple(load_runs(args.arm_b)))


def print_text(result) -> None:
    print(f"A: {result.arm_a}, {len(result.runs_a)} run(s)    "
          f"B: {result.arm_b}, {len(result.runs_b)} run(s)")
    for path, why in result.left_out.items():
        print(f"  left out: {path} ({why})")
    for path, busy in result.busy_host.items():
        print(f"  BUSY HOST: {path}: {note(busy)}")
    if result.differing_keys:
        print("differs between the arms:")
        for key, (va, vb) in result.differing_keys.items():
            print(f"  {key}: A {_values(va)}  B {_values(vb)}")
    else:
        print("differs between the arms: nothing in the workload keys or labels")
    if max(len(result.runs_a), len(result.runs_b)) < 4:
        print("noise floor unknown: it needs an arm of 4 runs or more; the interval alone "
              "decides (docs/comparing.md)")
    print(f"{'metric':28}{'unit':>9}{'A median':>11}{'B median':>11}{'B/A':>8}"
          f"{'95% interval':>18}  verdict")
    for m in result.metrics:
        if m.metric.partition(".")[2] not in TEXT_STATS:
            continue
        ci = "" if math.isnan(m.low) else f" {_ratio(m.low)} .. {_ratio(m.high)}"
        print(f"{m.metric:28}{m.unit:>9}{m.median_a:>11.4g}{m.median_b:>11.4g}"
              f"{' ' + _ratio(m.ratio):>8}{ci:>18}  {m.says()}")


def _ratio(value: float) -> str:
    """Three decimals, or three digits where those would run to hundreds (1e+306)."""
    return f"{value:.3f}" if abs(value) < 1e4 else f"{value:.3g}"


def _values(values) -> str:
    return values[0] if len(values) == 1 else "{" + ", ".join(map(str, values)) + "}"


def _print_csv(result) -> None:
    rows = [dict(asdict(m), says=m.says()) for m in result.metrics]
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["metric"])
    writer.writeheader()
    writer.writerows(rows)
