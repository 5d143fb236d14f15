"""The headline tables: a run's summary rows, or each arm's median over its runs beside the
others, in the order `steptrace show` prints them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List

import numpy as np

from ...schema.summary import HEADLINE, HOST, find, headline
from .markdown import Markdown, escape

# Also shown where a run has them: telemetry means and energy per token.
EXTRA = [("throughput", "total_tokens"), ("mfu", "model"), ("energy_per_output_token", "mean"),
         ("process_cpu", "mean"), ("host_cpu", "mean"), ("util", "mean"), ("power", "mean")]
HARDWARE = [("throughput", "requests"), ("throughput", "output_tokens"),
            ("goodput", "requests"), ("goodput", "attainment"), ("ttft", "p50"),
            ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("mfu", "model"),
            ("energy_per_output_token", "mean")]
# The hardware page's rows where an arm is P/D: each pool's per-device work, the transfers,
# each pool's MFU (a co-located arm's cells "–").
HARDWARE_PD = [("per_device", "input_tokens_per_prefill_device"),
               ("per_device", "output_tokens_per_decode_device"), ("kv_transfer", "p99"),
               ("decode_wait", "p99"), ("prefill_mfu", "model"), ("decode_mfu", "model")]
# The hardware page's answer, after the capacity and output tokens per device at capacity:
# how much of the load met the SLO, and the SLO's limits.
ANSWER = [("goodput", "requests"), ("goodput", "attainment"), ("slo", "ttft"), ("slo", "tpot"),
          ("slo", "e2e")]
# The harness host's own figures (not a device's): what the catalogue says the host times,
# and the host's CPU and memory.
HOST_ROWS = ("host_cpu", "host_mem_used", "process_rss")
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


def table(arms, keys=None, ratio: str = "ratio to first") -> Table:
    """Per arm, each metric's median over the arm's runs (a run's value for one run); rows
    no run has are left out, and a ratio column to the first arm with two or more arms
    (headed `ratio`)."""
    if keys is None:  # the runs' headline rows (a P/D run's pools' too), as show prints them
        present = {k for a in arms for r in a.runs for k in r.summary}
        keys = headline(present) + [k for k in EXTRA if k not in HEADLINE]
    t = Table([arm.label for arm in arms] + ([ratio] if len(arms) > 1 else []))
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


def host_row(row: List[str]) -> bool:
    """Whether a table row ("metric stat") is the harness host's own figure: its timings of
    itself (sched_call, step, harness, frontend, ...) or its CPU and memory."""
    metric = row[0].split(" ")[0]
    m = find(metric)
    return metric in HOST_ROWS or (m is not None and m.clock == HOST)


def split_host(t: Table) -> tuple:
    """(the table without the host's rows, a table of the host's rows alone)."""
    return (Table(t.columns, [r for r in t.rows if not host_row(r)]),
            Table(t.columns, [r for r in t.rows if host_row(r)]))


def answer(arms, capacity) -> Table:
    """The hardware page's headline: per arm, the capacity (req/s, where the arm's runs are
    capacity searches' runs at capacity; `capacity(run)` its rate or NaN), output tokens per
    second per device (at capacity where so), goodput and attainment, the SLO's limits, and
    the ratio to the first arm."""
    t = table(arms, ANSWER)
    rows = [_row(arms, "output tokens per device", "tok/s",
                 lambda run: run.stat("throughput", "output_tokens") / run.devices)]
    if any(math.isfinite(capacity(r)) for a in arms for r in a.runs):
        rows.insert(0, _row(arms, "capacity", "req/s", capacity))
    t.rows[:0] = rows
    return t


def per_device(arms, key=("throughput", "output_tokens"),
               name="output tokens per device") -> List[str]:
    """The row of output (or `key`'s) tokens per second per device: each run's throughput
    over the chips its engine ran on (Run.devices: a P/D run's both pools'), the arm's
    median."""
    return _row(arms, name, "tok/s", lambda run: run.stat(*key) / run.devices)


def devices(arms) -> List[str]:
    """The row of the chips each arm's runs ran on (Run.devices)."""
    return _row(arms, "devices", "devices", lambda run: float(run.devices))


def _row(arms, name: str, unit: str, value) -> List[str]:
    medians = []
    for arm in arms:
        values = [value(run) for run in arm.runs]
        values = [v for v in values if math.isfinite(v)]
        medians.append(float(np.median(values)) if values else float("nan"))
    base = medians[0]
    return [name, unit, *map(fmt, medians),
            " / ".join(fmt(m / base) if base else "–" for m in medians[1:])]
