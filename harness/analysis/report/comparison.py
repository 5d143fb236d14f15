"""The compare table of a two-arm report: `steptrace compare`'s result (medians, the ratio
B/A with its bootstrap interval over runs, the noise floor, the verdict) as rows, the
headline metrics of the runs' kind apart from the others."""

from __future__ import annotations

import math

from ...errors import BadInput
from ...record.busy_host import note
from .headline import fmt


def rows(arms) -> dict:
    """{a, b, sections, flagged, error}: B is the second arm, A the first; a section
    (title, rows, collapsed) holds the headline metrics of the runs' kind, the next every
    other metric, collapsed after a headline; `flagged` the runs on a busy host, each with
    its note; `error` instead where compare refuses the runs (different traces)."""
    from ..compare import Arm, compare

    a, b = (Arm(arm.label, tuple(r.run for r in arm.runs)) for arm in arms)
    try:
        result = compare(a, b, include_incomplete=True)
    except BadInput as e:
        return dict(a=a.name, b=b.name, sections=[], flagged={}, error=str(e))
    headline = [_row(m, b.name) for m in result.headline()]
    others = [_row(m, b.name) for m in result.others()]
    sections = [dict(title=f"The headline metrics of {result.kind} runs", rows=headline,
                     collapsed=False),
                dict(title=f"Every other metric ({len(others)})", rows=others,
                     collapsed=bool(headline))]
    return dict(a=a.name, b=b.name, error="", sections=[s for s in sections if s["rows"]],
                flagged={p: note(busy) for p, busy in result.busy_host.items()})


def _row(m, b: str) -> dict:
    ci = "–" if math.isnan(m.low) else f"{fmt(m.low)} – {fmt(m.high)}"
    return dict(metric=m.metric, unit=m.unit, a=fmt(m.median_a), b=fmt(m.median_b),
                ratio=fmt(m.ratio), interval=ci, says=m.says(b), difference=m.difference)
