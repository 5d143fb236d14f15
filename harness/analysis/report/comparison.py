"""The compare table of a two-arm report: `steptrace compare`'s result (medians, the ratio
B/A with its bootstrap interval over runs, the noise floor, the verdict) as rows."""

from __future__ import annotations

import math

from ...errors import BadInput
from ...record.busy_host import note
from ...schema.summary import TEXT_STATS
from .headline import fmt


def rows(arms) -> dict:
    """{a, b, rows, flagged, error}: B is the second arm, A the first; `flagged` the runs on
    a busy host, each with its note; `error` instead of rows where compare refuses the runs
    (different traces)."""
    from ..compare import Arm, compare

    a, b = (Arm(arm.label, tuple(r.run for r in arm.runs)) for arm in arms)
    try:
        result = compare(a, b, include_incomplete=True)
    except BadInput as e:
        return dict(a=a.name, b=b.name, rows=[], flagged={}, error=str(e))
    out = []
    for m in result.metrics:
        if m.metric.partition(".")[2] not in TEXT_STATS:
            continue
        ci = "–" if math.isnan(m.low) else f"{fmt(m.low)} – {fmt(m.high)}"
        out.append(dict(metric=m.metric, unit=m.unit, a=fmt(m.median_a), b=fmt(m.median_b),
                        ratio=fmt(m.ratio), interval=ci, says=m.says(),
                        difference=m.difference))
    return dict(a=a.name, b=b.name, rows=out, error="",
                flagged={p: note(busy) for p, busy in result.busy_host.items()})
