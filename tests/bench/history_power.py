"""How well `steptrace history detect` and `steptrace gate --rules` catch a regression on a
real A/A history (docs/comparing.md, "How often it alarms, how fast it finds a step").

    python -m tests.bench.history_power [--runs 100] [--out DIR] [--from RUNS]
        [--stepped PCT] [--steps PCT,...] [--noise-floor CLASS=PCT ...]

Runs workloads/quickstart.yaml (the tiny model on the CPU, the real clock) on a short
generated trace (SETTINGS) `--runs` times in one `steptrace run` (`repeats`), or reads the
runs of an earlier one (`--from`), and stamps the i-th run as commit `c{i:03d}`: an
A/A history, one build measured once per commit. In its series of the headline metrics it counts

- the false alarms: replaying the history push by push (at push j it holds commits 0..j),
  the distinct commits `history detect` (its code, Otava at p < 0.001 with its noise
  floors, or those `--noise-floor` sets) names as a regression at any push, and the
  commits `gate --rules` fails (each run against the first commit's run, the stored
  baseline, or against its predecessor's run), per 100 commits;
- with a step of each of `--steps` (STEPS) injected in the bad direction from a known commit on (each of
  INJECT_AT's fractions of the history in turn; the real values scaled): whether it is
  found, how many commits after the change (at the push of the changed commit: 0), and
  the commit named (its offset from the true one, within TOLERANCE).

It also runs `history detect` once on the whole A/A history, every metric's series, and
counts the change points it names: none is the promise (docs/comparing.md, "Noise floors").

It writes two stores under --out: `aa` (the runs as added) and `stepped` (the same rows,
a step of `--stepped` percent injected at INJECT_AT[1] into each of METRICS), for `history detect` and
`report --history`, and prints its table to stdout. Not part of any test tier: it runs
for minutes; tests/test_history_power.py checks its counting on synthetic series.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa

from harness.analysis import change_points, history_series, history_store
from harness.analysis.rules import Rule
from harness.record.run import Run
from harness.schema.summary import HIGHER, better

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "workloads" / "quickstart.yaml"
# quickstart's engine, model and clock on a short generated trace: 16 requests at 4 a
# second, 16 tokens out each, a run a few seconds on a quiet host
SETTINGS = ("trace={generate: {requests: 16, rate: 4, prompt: {uniform: [64, 256]}, "
            "output: {fixed: 16}}}", "calibration_requests=0", "warmup_steps=2")
METRICS = ("throughput.output_tokens", "tpot.p50", "ttft.p99", "sched_call.p50")
STEPS = (0.05, 0.10, 0.25)
INJECT_AT = (0.4, 0.6, 0.8)  # of the history's commits
TOLERANCE = 3  # commits either side of the true one a found change may name
FIRST_PUSH = 2  # the first push judged: a history of three commits
GATES = (("baseline", 0.05), ("baseline", 0.10), ("predecessor", 0.10))
START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def commit(i: int) -> str:
    return f"c{i:03d}"  # the trend figure names a commit by its first 7 characters


def commit_date(i: int) -> str:
    return (START + timedelta(hours=i)).isoformat(timespec="seconds")


def worse(values: np.ndarray, better_way: str, at: int, step: float) -> np.ndarray:
    """`values` (one per commit) made worse by `step` from index `at` on, as a noise floor
    measures a change: higher by it where lower is better (x 1.25 for 25 %), lower where
    higher is (/ 1.25)."""
    factor = 1 / (1 + step) if better_way == HIGHER else 1 + step
    out = np.array(values, dtype=float)
    out[at:] *= factor
    return out


def series_table(values: Sequence[float], metric: str, unit: str = "",
                 **labels) -> pd.DataFrame:
    """One series as history_series.series makes it: a run per commit, of this script's
    runs (the CPU device) but for the `labels` given (backend="cuda")."""
    name, _, stat = metric.partition(".")
    n = len(values)
    return pd.DataFrame(dict(dict(
        workload="quickstart", workload_hash="0" * 16, device="x86_64", backend="cpu",
        modeled=False, gil_mode="released", runner="", host="host", metric=name, stat=stat,
        unit=unit), **labels,
        commit=[commit(i) for i in range(n)], commit_date=[commit_date(i) for i in range(n)],
        runs=1, median=list(values), min=list(values), max=list(values)),
        columns=history_series.COLUMNS)


def detect_pushes(table: pd.DataFrame, first: int = FIRST_PUSH,
                  floors: Optional[Dict[str, float]] = None) -> Dict[int, Set[int]]:
    """Push j -> the commits (indexes) `history detect` (with `floors`, default its own)
    names as a regression when the history holds commits 0..j."""
    index = {c: i for i, c in enumerate(table["commit"])}
    out = {}
    for j in range(first, len(table)):
        points = change_points.detect(table.iloc[:j + 1], floors=floors)
        out[j] = {index[p.commit_after] for p in points if p.regression}
    return out


def gate_fails(values: np.ndarray, metric: str, better_way: str, wiring: str,
               limit: float) -> np.ndarray:
    """Per commit from 1 on, whether `gate --rules` with `limit` fails its run, judged
    against the first commit's run (`baseline`) or the one before it (`predecessor`): one
    run a side, the medians alone decide."""
    rule = Rule(metric, "max_decrease" if better_way == HIGHER else "max_increase", limit)
    against = values[:-1] if wiring == "predecessor" else np.full(len(values) - 1, values[0])
    return np.array([rule.broken_by(v / a) for v, a in zip(values[1:], against)])


@dataclass
class Found:
    """One injected step: found or not, after how many commits, at which commit (offset
    from the true one; for a gate the share of the commits from the change on it fails)."""

    delay: Optional[int]
    at: Optional[float]


def found_by_detect(pushes: Dict[int, Set[int]], at: int,
                    unchanged: Dict[int, Set[int]]) -> Found:
    """The first push from `at` on naming a regression within TOLERANCE commits of `at`
    that the history without the step (`unchanged`) does not name at that push."""
    for j in sorted(p for p in pushes if p >= at):
        near = sorted(pushes[j] - unchanged.get(j, set()), key=lambda i: (abs(i - at), i))
        if near and abs(near[0] - at) <= TOLERANCE:
            return Found(j - at, near[0] - at)
    return Found(None, None)


def found_by_gate(fails: np.ndarray, at: int) -> Found:
    """The first commit from `at` on, within TOLERANCE, that the gate fails (the commit it
    blames), and the share of the commits from `at` on it fails."""
    after = fails[at - 1:]  # fails[i] judges commit i + 1
    hits = np.flatnonzero(after[:TOLERANCE + 1])
    return Found(int(hits[0]) if len(hits) else None, float(after.mean()))


def false_alarms_detect(pushes: Dict[int, Set[int]]) -> float:
    """Distinct commits named a regression at any push, per 100 commits pushed."""
    named = set().union(*pushes.values()) if pushes else set()
    return 100 * len(named) / max(len(pushes), 1)


def false_alarms_gate(fails: np.ndarray) -> float:
    return 100 * float(fails.mean()) if len(fails) else 0.0


def run_repeats(runs: int, out: Path) -> Path:
    """`runs` repeats of the workload in one `steptrace run`; the folder of their runs."""
    command = [sys.executable, "-m", "harness.commands", "run", str(WORKLOAD), "--json",
               "--set", f"repeats={runs}", "--set", f"output={out}",
               *[a for s in SETTINGS for a in ("--set", s)]]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))
    return out / "quickstart"


def ordered(folder: Path) -> List[Path]:
    """The complete runs of one `steptrace run` in the order run (their `-rN` suffix): one
    stopped by a signal leaves its last run incomplete."""
    found = [p for p in folder.iterdir()
             if re.search(r"-r\d+$", p.name) and Run.read(p).complete]
    return sorted(found, key=lambda p: int(p.name.rsplit("-r", 1)[1]))


def stores(runs: Sequence[Path], out: Path, step: float) -> Tuple[Path, Path]:
    """`aa`: the i-th run at commit i; `stepped`: the same rows with `step` injected from
    INJECT_AT[1] of the commits on into each of METRICS."""
    aa, stepped = out / "aa", out / "stepped"
    at = int(INJECT_AT[1] * len(runs))
    for store in (aa, stepped):
        if store.exists():  # a stepped store of another step would be kept as it was
            raise SystemExit(f"{store} exists: give --out a new folder")
        history_store.make(store)
    for i, path in enumerate(runs):
        run = Run.read(path)
        prov = history_store.Provenance(commit(i), commit_date(i))
        history_store.add(aa, run, prov)
        table = history_store.rows(run, prov).to_pandas()
        if i >= at:
            for metric in METRICS:
                name, _, stat = metric.partition(".")
                mine = (table["metric"] == name) & (table["stat"] == stat)
                table.loc[mine, "value"] = worse(table.loc[mine, "value"].to_numpy(),
                                                 better(name, stat), 0, step)
        frame = pa.Table.from_pandas(table, schema=history_store.SCHEMA, preserve_index=False)
        history_store.write(stepped, history_store.run_key(run), lambda: frame)
    return aa, stepped


def spread(values: np.ndarray) -> str:
    """The A/A spread: median, robust coefficient of variation, 5th to 95th percentile."""
    median = float(np.median(values))
    cv = 1.4826 * float(np.median(np.abs(values - median))) / median
    lo, hi = np.percentile(values, [5, 95])
    return f"median {median:.4g}, robust CV {cv:.0%}, p5..p95 {lo:.3g}..{hi:.3g}"


def _list(items, text) -> str:
    return ",".join("-" if x is None else text(x) for x in items)


def detect_row(values: np.ndarray, metric: str, better_way: str, steps: Sequence[float],
               floors: Dict[str, float]) -> List[str]:
    unchanged = detect_pushes(series_table(values, metric), floors=floors)
    cells = [f"{false_alarms_detect(unchanged):.1f}"]
    for step in steps:
        found = []
        for fraction in INJECT_AT:
            at = int(fraction * len(values))
            table = series_table(worse(values, better_way, at, step), metric)
            found.append(found_by_detect(detect_pushes(table, at, floors), at, unchanged))
        hits = sum(f.delay is not None for f in found)
        cells.append(f"{hits}/{len(found)} after {_list([f.delay for f in found], str)} "
                     f"at {_list([f.at for f in found], lambda x: f'{x:+d}')}")
    return cells


def gate_row(values: np.ndarray, metric: str, better_way: str, wiring: str,
             limit: float, steps: Sequence[float]) -> List[str]:
    cells = [f"{false_alarms_gate(gate_fails(values, metric, better_way, wiring, limit)):.1f}"]
    for step in steps:
        found = []
        for fraction in INJECT_AT:
            at = int(fraction * len(values))
            fails = gate_fails(worse(values, better_way, at, step), metric, better_way,
                               wiring, limit)
            found.append(found_by_gate(fails, at))
        hits = sum(f.delay is not None for f in found)
        cells.append(f"{hits}/{len(found)} after {_list([f.delay for f in found], str)} "
                     f"fails {_list([f.at for f in found], lambda x: f'{100 * x:.0f}')}%")
    return cells


def header(runs: Sequence[Path], floors: Dict[str, float]) -> List[str]:
    first, last = Run.read(runs[0]).manifest, Run.read(runs[-1]).manifest
    busy = sum(Run.read(p).busy_host is not None for p in runs)
    others = [(Run.read(p).manifest.host_share or {}).get("other_cpu_pct") for p in runs]
    others = [x for x in others if x is not None]
    return [
        f"history power: {len(runs)} runs of one build of {WORKLOAD.relative_to(REPO)} "
        f"({', '.join(SETTINGS)}), one per commit, on {first.host} "
        f"({os.cpu_count()} cores, {platform.machine()}), started {first.started} "
        f"to {last.started}",
        f"  {busy} of {len(runs)} runs noted a busy host (other processes held "
        f"{np.median(others):.0f}% of the host's CPU at the median run, "
        f"{max(others):.0f}% at most)",
        f"  history detect: Otava at p < {change_points.MAX_PVALUE:g}, "
        f"{change_points.MIN_SEGMENT} commits a side, noise floors "
        f"{', '.join(f'{k} {v:.0%}' if v < 1e9 else f'{k} not judged' for k, v in floors.items())}"
        f"; replayed push by push "
        f"from commit {FIRST_PUSH}; a step counts as found when a push names a regression "
        f"within {TOLERANCE} commits of it",
        f"  gate --rules: one run a side; baseline = the first commit's run, predecessor = "
        f"the commit before; steps injected at commits "
        f"{', '.join(str(int(f * len(runs))) for f in INJECT_AT)}",
        "  'after': commits from the change to the first push that finds it (0: the changed "
        "commit's own push); 'at': the commit named, from the true one (a regression the "
        "history without the step names too is not counted); a gate finds it when it fails "
        f"a commit within {TOLERANCE} of the change (the commit it blames); 'fails': the "
        "share of the commits from the change on that the gate fails",
    ]


def whole(rows: pd.DataFrame, floors: Dict[str, float]) -> str:
    """`history detect` on the whole A/A history: what it names, in every series."""
    table = history_series.series(rows)
    points = change_points.detect(table, floors=floors)
    named = ", ".join(f"{p.series['metric']}.{p.series['stat']} {p.commit_after} "
                      f"{p.change_pct:+.0f}%" for p in points[:6])
    count = len(list(history_series.each_series(table)))
    return (f"  history detect on the whole A/A history ({count} series): {len(points)} "
            f"change point(s), {sum(p.regression for p in points)} regression(s)"
            f"{': ' if named else ''}{named}{', ...' if len(points) > 6 else ''}")


def table(rows: pd.DataFrame, steps: Sequence[float] = STEPS,
          floors: Optional[Dict[str, float]] = None) -> List[str]:
    floors = floors or change_points.NOISE_FLOORS
    out = [f"{'metric':26}{'method':24}{'A/A alarms':>11}  "
           + "  ".join(f"{f'{s:.0%} step':35}" for s in steps).rstrip(),
           f"{'':26}{'':24}{'/100 commits':>11}"]
    for metric in METRICS:
        values, unit = _values(rows, metric)
        name, _, stat = metric.partition(".")
        better_way = better(name, stat)
        out.append(f"{metric:26}A/A: {spread(values)} {unit}")
        methods = [("history detect", detect_row(values, metric, better_way, steps, floors))]
        methods += [(f"gate {limit:.0%} vs {wiring}",
                     gate_row(values, metric, better_way, wiring, limit, steps))
                    for wiring, limit in GATES]
        for method, cells in methods:
            out.append((f"{'':26}{method:24}{cells[0]:>11}  "
                        + "  ".join(f"{c:35}" for c in cells[1:])).rstrip())
    return out


def _values(rows: pd.DataFrame, metric: str) -> Tuple[np.ndarray, str]:
    table = history_series.series(history_series.select(rows, metric, []))
    (labels, part), = history_series.each_series(table)  # one configuration
    if (part["runs"] != 1).any():
        raise SystemExit(f"{metric}: a commit with more than one run")
    return part["median"].to_numpy(dtype=float), str(part["unit"].iloc[0])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.history_power",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100, help="runs, one per commit (%(default)s)")
    p.add_argument("--from", dest="source", type=Path, metavar="RUNS",
                   help="the runs of an earlier `steptrace run` (its results/quickstart)")
    p.add_argument("--out", type=Path, help="where the runs and the stores go (default: a "
                   "temporary folder, removed)")
    p.add_argument("--stepped", type=float, default=10.0, metavar="PCT",
                   help="the step of the `stepped` store, in percent (%(default)s)")
    p.add_argument("--steps", type=_steps, default=STEPS, metavar="PCT,...",
                   help="the steps injected, in percent (5,10,25; 100: a latency doubled, "
                   "a throughput halved)")
    p.add_argument("--noise-floor", action="append", default=[], metavar="CLASS=PCT",
                   help="judge with this noise floor (as `history detect --noise-floor`)")
    args = p.parse_args(argv)
    floors = change_points.noise_floors(args.noise_floor)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        folder = args.source or run_repeats(args.runs, out / "runs")
        runs = ordered(folder)
        aa, _ = stores(runs, out, args.stepped / 100)
        rows = history_store.read(aa)
        print(*header(runs, floors), whole(rows, floors), *table(rows, args.steps, floors),
              sep="\n")
    return 0


def _steps(text: str) -> Tuple[float, ...]:
    try:
        steps = tuple(float(x) / 100 for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected percentages, 5,10,25") from None
    if not all(s > 0 for s in steps):
        raise argparse.ArgumentTypeError(f"{text!r}: each step above 0")
    return steps


if __name__ == "__main__":
    sys.exit(main())
