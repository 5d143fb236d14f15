"""The headline tables: a run's summary rows, or each arm's median over its runs beside the
others, in the order `steptrace show` prints them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List

import numpy as np

from ...schema.summary import HEADLINE
from .markdown import Markdown, escape

# Also shown where a run has them: telemetry means and energy per token.
EXTRA = [("throughput", "total_tokens"), ("mfu", "model"), ("energy_per_output_token", "mean"),
         ("process_cpu", "mean"), ("host_cpu", "mean"), ("util", "mean"), ("power", "mean")]
HARDWARE = [("throughput", "requests"), ("throughput", "output_tokens"),
            ("goodput", "requests"), ("goodput", "attainment"), ("ttft", "p50"),
            ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("mfu", "model"),
            ("energy_per_output_token", "mean")]
GIL = [("sched_call", "p50"), ("sched_call", "p99"), ("sched_cpp", "p50"),
       ("sched_cpp", "p99"), ("throughput", "output_tokens"), ("ttft", "p99")]


@dataclass
class Table:
    columns: List[str]                     # one per arm (a run's name for one run)
    rows: List[List[str]] = field(default_factory=list)  # metric, unit, a cell per column

    def markdown(self) -> Markdown:
        """The table in Markdown, every cell escaped (an arm's label, a unit, a metric)."""
        rows = [["metric", "unit", *self.columns]] + self.rows
        lines = ["| " + " | ".join(map(escape, r)) + " |" for r in rows]
        lines.insert(1, "|---|---|" + "---:|" * len(self.columns))
        return Markdown("\n".join(lines))


def fmt(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.4g}"


def arm_median(arm, key) -> float:
    values = [r.stat(*key) for r in arm.runs]
    values = [v for v in values if math.isfinite(v)]
    return float(np.median(values)) if values else float("nan")


def table(arms, keys=None) -> Table:
    """Per arm, each metric's median over the arm's runs (a run's value for one run); rows
    no run has are left out, and a ratio column to the first arm with two or more arms."""
    keys = keys or HEADLINE + [k for k in EXTRA if k not in HEADLINE]
    t = Table([arm.label for arm in arms] + (["ratio to first"] if len(arms) > 1 else []))
    for key in keys:
        units = [r.summary[key][1] for a in arms for r in a.runs if key in r.summary]
        if not units:
            continue
        medians = [arm_median(a, key) for a in arms]
        cells = [fmt(m) for m in medians]
        if len(arms) > 1:
            base = medians[0]
            cells.append(" / ".join(fmt(m / base) if base else "–" for m in medians[1:]))
        t.rows.append([f"{key[0]} {key[1]}", units[0], *cells])
    return t


def per_device(arms) -> List[str]:
    """The row of output tokens per second per device: each run's output throughput over
    the chips its engine ran on (Run.devices), the arm's median."""
    medians = []
    for arm in arms:
        values = []
        for run in arm.runs:
            values.append(run.stat("throughput", "output_tokens") / run.devices)
        values = [v for v in values if math.isfinite(v)]
        medians.append(float(np.median(values)) if values else float("nan"))
    base = medians[0]
    return ["output tokens per device", "tok/s", *map(fmt, medians),
            " / ".join(fmt(m / base) if base else "–" for m in medians[1:])]
