"""The sweep page's leading section where the sweep is a frontier search (docs/report.md,
"The frontier search's answer"): each device's fronts drawn, each front read at the levels
with its interval, its ratio to the reference and the deployments around the level, the
deployments each device considered by state, and the rungs left off the fronts with why."""

from __future__ import annotations

import math

from ...schema.frontier_tables import STATES
from .figures import device_fronts
from .frontier_data import DRAWN, Frontier
from .headline import fmt

# the readings' metric -> the measure it reads; `output` and `total` always shown, the
# others where some reading has a value (a device's power, a price)
MEASURES = {"output": "output tok/s per device", "total": "total tok/s per device",
            "per_kw": "output tok/s per kW", "per_dollar_hour": "output tok/s per $/h"}


def context(frontier: Frontier) -> dict:
    timed = "; ".join(f"{device} {', '.join(said)}"
                      for device, said in frontier.timed_by.items())
    timed = f"The front points' steps (their runs' manifests): {timed}." if timed else ""
    readings = frontier.readings
    metrics = [m for m in dict.fromkeys([*DRAWN, *readings["metric"]])
               if m in DRAWN or readings.loc[readings["metric"] == m, "value"].notna().any()]
    return dict(
        note=timed, modeled=frontier.modeled,
        figures=[device_fronts.draw(frontier, m, timed) for m in DRAWN],
        levels=[f"{x:g}" for x in frontier.levels],
        measures=[_measure(readings[readings["metric"] == m], m) for m in metrics],
        states=STATES, counts=frontier.counts(),
        left_off=[dict(device=r.device, deployment=r.deployment, kind=r.kind,
                       concurrency=int(r.concurrency), status=r.status, why=r.left_off)
                  for r in frontier.points[~frontier.points["eligible"]].itertuples()])


def _measure(readings, metric: str) -> dict:
    references = list(dict.fromkeys(r for r in readings["reference"] if r))
    return dict(key=metric, axis=MEASURES.get(metric, metric),
                reference=", ".join(references) or "the reference",
                rows=[_reading(r) for r in readings.itertuples()])


def _reading(r) -> dict:
    found, related = math.isfinite(r.value), math.isfinite(r.ratio)
    reference = r.device == r.reference
    return dict(
        level=f"{r.level:g}", device=r.device, found=found,
        raw=repr(float(r.value)), raw_ratio=repr(float(r.ratio)),
        value=f"{fmt(r.value)} [{fmt(r.low)}, {fmt(r.high)}]" if found else "–",
        ratio="1 (reference)" if reference and related else
        f"{r.ratio:.2f}x [{r.ratio_low:.2f}, {r.ratio_high:.2f}]" if related else "–",
        left=r.left if found else "–", right=r.right if found else "–",
        why=r.reason if not found else "" if related else r.ratio_reason)
