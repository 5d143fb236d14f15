"""The frontier search's answer (docs/frontier.md, "The tables"): each rung as a front
point or left off with its reason, each device's fronts of output and total tok/s per
device against tok/s per user, their readings at the levels, and each device's ratio to the
reference there."""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence, Tuple

import pandas as pd

from ...analysis import frontier
from ...schema.frontier_tables import (
    FLAGGED,
    FRONTIER_DEPLOYMENTS,
    FRONTIER_POINTS,
    FRONTIER_READINGS,
    MEASURES,
)
from ..points.cost import costs
from .deployments import Deployment
from .ladder import Rung


def kind(d: Deployment) -> str:
    return "P/D" if d.candidate.disaggregated else "co-located"


def eligibility(r: Rung, ttft_limit: Optional[float]) -> str:
    """Why the rung is left off the fronts ('' where it is a front point)."""
    if r.row.get("status") != "done":
        return f"{r.row.get('status')}: {r.row.get('reason')}"
    if not r.steady.found:
        return f"no steady window: {r.steady.reason}"
    if ttft_limit is not None and not r.steady.ttft_p90_s <= ttft_limit:
        return (f"TTFT p90 {r.steady.ttft_p90_s:.3g} s over the SLO's {ttft_limit:g} s: "
                f"its requests queue")
    return ""


def points_table(rungs: Sequence[Rung], ttft_limit: Optional[float],
                 prices: Dict[str, float]) -> pd.DataFrame:
    """One row a rung, in the ladders' order; `front_output`, `front_total`: on that front;
    per kW and per dollar-hour as the sweep's table has them (cost.py), of the steady
    output."""
    rows = []
    for r in rungs:
        d, s, row = r.deployment, r.steady, r.row
        reason = eligibility(r, ttft_limit)
        cost = costs(dict(device=d.device, power_w=row.get("power_w"),
                          output_tokens_per_device=s.output_tokens_per_s_per_device), prices)
        rows.append(dict(
            device=d.device, deployment=d.label, kind=kind(d), devices=d.devices,
            mtp=d.candidate.mtp, batch=r.batch, concurrency=r.concurrency,
            requests=r.requests, point=row.get("point", ""), status=row.get("status", ""),
            reason=row.get("reason", ""), stop=r.stop, steady=s.found,
            steady_reason=s.reason, window_start_s=s.start_s, window_end_s=s.end_s,
            window_s=s.length_s, window_steps=s.steps,
            output_tokens_per_s_per_device=s.output_tokens_per_s_per_device,
            total_tokens_per_s_per_device=s.total_tokens_per_s_per_device,
            tokens_per_s_per_user=s.tokens_per_s_per_user, tpot_p50_s=s.tpot_p50_s,
            tpot_p90_s=s.tpot_p90_s, ttft_p50_s=s.ttft_p50_s, ttft_p90_s=s.ttft_p90_s,
            whole_run_output_tokens_per_device=_float(row.get("output_tokens_per_device")),
            whole_run_tokens_per_s_per_user=_float(row.get("tokens_per_s_per_user")),
            attainment=_float(row.get("attainment")), power_w=_float(row.get("power_w")),
            output_tokens_per_kw=cost["output_tokens_per_kw"],
            output_tokens_per_dollar_hour=cost["output_tokens_per_dollar_hour"],
            eligible=not reason, left_off=reason))
    df = pd.DataFrame(rows, columns=[c for c in FRONTIER_POINTS.names
                                     if not c.startswith("front_")])
    for metric in FLAGGED:
        column, on = MEASURES[metric], set()
        for device in dict.fromkeys(df["device"]):
            on |= {(device, p.label) for p in _front(df[df["device"] == device], column).points}
        df[f"front_{metric}"] = [(r.device, _label(r)) in on for r in df.itertuples()]
    return df


def _label(r) -> str:
    return f"{r.deployment} @ {r.concurrency}"


def readings_table(points: pd.DataFrame, levels: Sequence[float],
                   reference: str) -> pd.DataFrame:
    """Each device's fronts read at each level, and its ratio to `reference` there."""
    rows = []
    devices = list(dict.fromkeys(points["device"]))
    for metric, column in MEASURES.items():
        fronts = {d: _front(points[points["device"] == d], column) for d in devices}
        for level in levels:
            ref = frontier.read(fronts[reference], level) if reference in fronts else None
            for device in devices:
                reading = frontier.read(fronts[device], level)
                ratio = _ratio(reading, ref, device == reference, reference)
                rows.append(dict(metric=metric, device=device, level=level,
                                 **_reading(reading), reference=reference,
                                 ratio=ratio.value, ratio_low=ratio.low,
                                 ratio_high=ratio.high, ratio_reason=ratio.reason))
    return pd.DataFrame(rows, columns=list(FRONTIER_READINGS.names))


def _ratio(reading: frontier.Reading, ref: Optional[frontier.Reading], itself: bool,
           reference: str) -> frontier.Ratio:
    """The reading over the reference's at its level; the reference over itself exactly 1."""
    if ref is None:
        return frontier.Ratio(reason=f"the reference {reference} has no point")
    if not itself:
        return frontier.ratio(reading, ref)
    return frontier.Ratio(1.0, 1.0, 1.0) if reading.found else \
        frontier.Ratio(reason=reading.reason)


def _front(points: pd.DataFrame, column: str) -> frontier.Front:
    return frontier.envelope(
        frontier.Point(float(r.tokens_per_s_per_user), float(getattr(r, column)), _label(r),
                       bool(r.eligible), str(r.left_off)) for r in points.itertuples())


def _reading(r: frontier.Reading) -> Dict:
    def side(p: Optional[frontier.Point]) -> Tuple[str, float, float]:
        return (p.label, p.x, p.y) if p is not None else ("", math.nan, math.nan)

    (left, left_x, left_y), (right, right_x, right_y) = side(r.left), side(r.right)
    return dict(value=r.value, low=r.low, high=r.high, left=left, left_x=left_x,
                left_y=left_y, right=right, right_x=right_x, right_y=right_y,
                reason=r.reason)


def deployments_table(deployments: Sequence[Deployment]) -> pd.DataFrame:
    return pd.DataFrame([dict(
        device=d.device, deployment=d.label, kind=kind(d), devices=d.devices,
        mtp=d.candidate.mtp, state=d.state, reason=d.reason, score=d.score,
        estimated_best=max((y for _, y in d.estimate.points), default=math.nan)
        if d.estimate else math.nan) for d in deployments],
        columns=list(FRONTIER_DEPLOYMENTS.names))


def _float(v) -> float:
    return math.nan if v is None else float(v)
