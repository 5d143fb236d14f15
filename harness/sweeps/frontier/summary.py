"""frontier.md: the answer as a person reads it: each device's output tok/s per device at
each level of tok/s per user, with its interval and the deployments around it, its ratio to
the reference, and every rung left off the fronts, with its reason."""

from __future__ import annotations

import math
from typing import List

import pandas as pd

from ...schema.frontier_tables import FLAGGED

# each measure's heading and unit (schema MEASURES)
TITLES = {"output": ("Output tok/s per device", "tok/s per device"),
          "total": ("Total tok/s per device", "tok/s per device"),
          "per_kw": ("Output tok/s per kW", "tok/s per kW"),
          "per_dollar_hour": ("Output tok/s per $/h", "tok/s per $/h")}


def _number(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _ratio(r) -> str:
    if not math.isfinite(r.ratio):
        return "-"
    return f"{r.ratio:.2f}x [{r.ratio_low:.2f}, {r.ratio_high:.2f}]"


def markdown(points: pd.DataFrame, readings: pd.DataFrame, reference: str) -> str:
    lines: List[str] = ["# Fronts", "",
                        "Modeled: each device's steps are timed by its profile's kernel tables "
                        "or rooflines (docs/modeling.md says how far they miss published "
                        "figures). Figures over each run's steady window.", ""]
    for metric, (title, unit) in TITLES.items():
        these = readings[readings["metric"] == metric]
        if metric not in FLAGGED and not these["value"].notna().any():
            continue  # no power or no prices: said in the tables' NaNs, not a page of dashes
        lines += [f"## {title} at equal tok/s per user", "",
                  f"Ratio to {reference}; the interval spans the front's two measured points "
                  f"around the level.", "",
                  f"| device | tok/s per user | {unit} [interval] | ratio | between |",
                  "|---|---|---|---|---|"]
        for r in these.itertuples():
            if math.isfinite(r.value):
                cell = f"{_number(r.value)} [{_number(r.low)}, {_number(r.high)}]"
                between = r.left if r.left == r.right else f"{r.left}; {r.right}"
            else:
                cell, between = "-", r.reason
            lines.append(f"| {r.device} | {r.level:g} | {cell} | {_ratio(r)} | {between} |")
        lines.append("")
    off = points[~points["eligible"]]
    lines += ["## Left off the fronts", ""]
    if off.empty:
        lines.append("None: every rung had a steady window within the SLO's TTFT.")
    else:
        lines += ["| device | deployment | concurrency | why |", "|---|---|---|---|"]
        lines += [f"| {r.device} | {r.deployment} | {r.concurrency} | {r.left_off} |"
                  for r in off.itertuples()]
    return "\n".join(lines) + "\n"
