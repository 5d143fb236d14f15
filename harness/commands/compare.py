"""steptrace compare A... -- B... | --by KEY RUNS...: two arms of runs, metric by metric,
with bootstrap intervals over runs and a verdict (docs/comparing.md); the text leads with
the headline metrics of the runs' kind, `--all` adds the rest. `--by KEY` with more than
two values compares each value's arm against the baseline's. A measured arm and a modeled
one of one workload also have their step parts compared, bucket by bucket."""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import asdict

from ..errors import BadInput
from .common import add_json, print_json

ARM_B = "--arm-b"


def add(p) -> None:
    p.description = ("Compare arm B against arm A: `compare A... -- B...` (run folders, globs or "
                     "folders of runs), or `compare --by KEY RUNS...` (a label: gil_mode, "
                     "overlap, device; or a workload key).")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folders, globs or folders holding runs; `--` between the arms")
    p.add_argument("--by", metavar="KEY", help="split the runs into arms by this label "
                   "(gil_mode, overlap, device, repeat) or workload key (engine.num_mtp)")
    p.add_argument("--baseline", metavar="VALUE", help="with --by: the value whose arm the "
                   "others are compared against (default: the first in the runs' order)")
    p.add_argument("--allow-different", action="store_true",
                   help="compare runs of different traces (their trace_sha256 differ)")
    p.add_argument("--include-incomplete", action="store_true",
                   help="keep runs that did not complete (killed, interrupted, failed)")
    p.add_argument("--drop-busy", action="store_true",
                   help="leave out runs whose host was busy with other work")
    p.add_argument(ARM_B, nargs="*", help=argparse.SUPPRESS)  # what `--` split off
    p.add_argument("--all", action="store_true",
                   help="print every metric after the headline ones (--json and --csv always do)")
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

    baseline, *others = _arms(args)
    results = [compare(baseline, other, allow_different=args.allow_different,
                       include_incomplete=args.include_incomplete, drop_busy=args.drop_busy,
                       parts=True)
               for other in others]
    if args.json:  # one comparison as before; several under the baseline's name
        print_json(results[0].to_dict() if len(results) == 1 else dict(
            baseline=baseline.name, comparisons=[r.to_dict() for r in results]))
    elif args.csv:
        _print_csv(results)
    else:
        for i, result in enumerate(results):
            if i:
                print()
            print_text(result, every=args.all)
        print_busy_runs(results)
    return 0


def _arms(args):
    from ..analysis.compare import Arm, arms_by
    from ..analysis.runs import load_runs

    if args.by:
        if args.arm_b is not None:
            raise BadInput("compare: give either `A... -- B...` or --by KEY, not both")
        return arms_by(load_runs(args.runs), args.by, args.baseline)
    if args.baseline is not None:
        raise BadInput("compare: --baseline VALUE names a value of --by KEY; with "
                       "`A... -- B...` arm A is the baseline")
    if args.arm_b is None:
        raise BadInput("compare: two arms needed: `compare A... -- B...` or "
                       "`compare --by KEY RUNS...`")
    if not args.arm_b:
        raise BadInput("compare: an arm is empty: `compare A... -- B...` needs runs on "
                       "both sides of `--`")
    return [Arm("", tuple(load_runs(args.runs))), Arm("", tuple(load_runs(args.arm_b)))]


def print_text(result, every: bool = False) -> None:
    """What was compared, then the headline metrics' rows; with `every`, all the others'."""
    print(f"A: {result.arm_a}, {len(result.runs_a)} run(s)    "
          f"B: {result.arm_b}, {len(result.runs_b)} run(s)")
    for path, why in result.left_out.items():
        print(f"  left out: {path} ({why})")
    if result.busy_host:
        print(f"  {result.busy_line()}; the runs are listed at the end")
    if result.differing_keys:
        print("differs between the arms:")
        for key, (va, vb) in result.differing_keys.items():
            print(f"  {key}: A {_values(va)}  B {_values(vb)}")
    else:
        print("differs between the arms: nothing in the workload keys or labels")
    if max(len(result.runs_a), len(result.runs_b)) < 4:
        print("noise floor unknown: it needs an arm of 4 runs or more; the interval alone "
              "decides (docs/comparing.md)")
    headline, others = result.headline(), result.others()
    width = max([9] + [len(m.unit) + 1 for m in headline + others])  # "% of one core"
    shown = headline + others if every or not headline else headline
    name = max([28] + [len(m.metric) + 1 for m in shown])  # session_prefix_hit.later_turns
    print(f"{'metric':{name}}{'unit':>{width}}{'A median':>11}{'B median':>11}{'B/A':>8}"
          f"{'95% interval':>18}  verdict")
    for m in headline:
        _print_row(m, result.arm_b, width, name)
    if (every or not headline) and others:
        print(f"every other metric ({len(others)}):")
        for m in others:
            _print_row(m, result.arm_b, width, name)
    elif others:
        print(f"(the headline metrics of {result.kind} runs; --all adds {len(others)} more, "
              f"--json and --csv carry every statistic)")
    if result.step_parts is not None:
        print_parts(result.step_parts)


def print_busy_runs(results) -> None:
    """The runs on a busy host, once, after every comparison's table (each comparison
    counted them in one line)."""
    busy = dict(kv for r in results for kv in r.busy_host.items())
    if busy:
        print()
        print(f"runs on a busy host ({len(busy)}; `steptrace show RUN` says which figures "
              f"of each it may have moved):")
        for path in busy:
            print(f"  {path}")


def print_parts(parts) -> None:
    """The step parts of a measured arm against a modeled one (analysis/parts_error.py):
    what is modeled, how steps were matched, a row per bucket and one per part overall."""
    print()
    print(f"step parts, modeled vs measured: arm {parts.modeled_arm} is MODELED (the "
          f"{parts.profile} profile's device model), arm {parts.measured_arm} measured on "
          f"{parts.measured_device}")
    if parts.not_compared:
        print(f"  not compared: {parts.not_compared}")
        return
    print("  steps matched by the rank's batch: its phase and its scheduled tokens (tokens_q) "
          "in power-of-two buckets; warm-up steps left out")
    print("  error = modeled / measured median - 1 (beyond 10x either way: the factor "
          "modeled/measured); 95% interval: the measured steps resampled")
    if parts.parts:
        print(f"{'part':11}{'phase':9}{'tokens':>11}{'measured s':>12}{'steps':>7}"
              f"{'modeled s':>12}{'steps':>7}{'error':>10}{'95% interval':>24}")
    for part in parts.parts:
        for b in part.buckets:
            ci = "" if math.isnan(b.low) else f"{_error(b.low)} .. {_error(b.high)}"
            print(f"{part.part:11}{b.phase:9}{_tokens(b):>11}"
                  f"{b.measured_s:>12.4g}{b.steps_measured:>7}{b.modeled_s:>12.4g}"
                  f"{b.steps_modeled:>7}{_error(b.error):>10}{ci:>24}")
        print(f"{part.part:11}{'overall, weighted by measured steps':52}"
              f"{_error(part.error):>10}  ({part.steps_compared} of {part.steps_measured} "
              f"measured steps in buckets both arms have)")
    for name, why in parts.left_out.items():
        print(f"  left out: {name}: {why}")


def _tokens(bucket) -> str:
    low, high = bucket.tokens_from, bucket.tokens_to
    return str(low) if low == high else f"{low}-{high}"


def _error(error: float) -> str:
    """modeled / measured - 1 as a percentage; beyond 10x either way the factor ("x3.1e-06"),
    which a percentage would round to -100.0%; "-" for none."""
    if math.isnan(error):
        return "-"
    ratio = error + 1
    return f"{error:+.1%}" if 0.1 <= ratio <= 10 else f"x{ratio:.3g}"


def _print_row(m, b: str, width: int, name: int) -> None:
    ci = "" if math.isnan(m.low) else f" {_ratio(m.low)} .. {_ratio(m.high)}"
    print(f"{m.metric:{name}}{m.unit:>{width}}{m.median_a:>11.4g}{m.median_b:>11.4g}"
          f"{' ' + _ratio(m.ratio):>8}{ci:>18}  {m.says(b)}")


def _ratio(value: float) -> str:
    """Three decimals, or three digits where those would run to hundreds (1e+306); "-"
    for none (a metric 0 in both arms, or undefined)."""
    if math.isnan(value):
        return "-"
    return f"{value:.3f}" if abs(value) < 1e4 else f"{value:.3g}"


def _values(values) -> str:
    return values[0] if len(values) == 1 else "{" + ", ".join(map(str, values)) + "}"


def _print_csv(results) -> None:
    """The metric rows; of several comparisons, each row led by its arms' names."""
    rows = [dict(**(dict(arm_a=r.arm_a, arm_b=r.arm_b) if len(results) > 1 else {}),
                 **asdict(m), says=m.says(r.arm_b)) for r in results for m in r.metrics]
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["metric"])
    writer.writeheader()
    writer.writerows(rows)
