"""The compare table of a two-arm report: `steptrace compare`'s result (medians, the ratio
B/A with its bootstrap interval over runs, the noise floor, the verdict) as rows, the
headline metrics of the runs' kind apart from the others."""

from __future__ import annotations

import math
from typing import List

from ...errors import BadInput
from ...record.busy_host import note
from .headline import fmt


def rows(arms) -> dict:
    """{a, b, sections, busy, flagged, error}: B is the second arm, A the first; a section
    (title, rows, collapsed) holds the headline metrics of the runs' kind, the next every
    other metric, collapsed after a headline; `busy` the runs on a busy host in one line
    (Comparison.busy_line), `flagged` those runs, each with its note (the page collapses
    them); `error` instead where compare refuses the runs (different traces)."""
    from ..compare import Arm, compare

    a, b = (Arm(arm.label, tuple(r.run for r in arm.runs)) for arm in arms)
    try:
        result = compare(a, b, include_incomplete=True)
    except BadInput as e:
        return dict(a=a.name, b=b.name, sections=[], busy="", flagged={}, error=str(e))
    return _sections(result, a.name, b.name)


def _sections(result, a: str, b: str) -> dict:
    headline = [_row(m, b) for m in result.headline()]
    others = [_row(m, b) for m in result.others()]
    sections = [dict(title=f"The headline metrics of {result.kind} runs", rows=headline,
                     collapsed=False),
                dict(title=f"Every other metric ({len(others)})", rows=others,
                     collapsed=bool(headline))]
    return dict(a=a, b=b, error="", sections=[s for s in sections if s["rows"]],
                busy=result.busy_line(),
                flagged={p: note(busy) for p, busy in result.busy_host.items()})


def verdict(arms) -> list:
    """`steptrace gil`'s verdict (harness/commands/gil.py): each arm against the released
    one, over the complete runs, in a sweep's order of arms (GIL_ARMS), on
    docs/gil.md's primary metrics (every other metric after them). Per arm, as `rows` gives
    the comparison of two arms ({a, b, sections, busy, flagged, error}); none unless the
    complete runs hold the released arm and another."""
    from ..compare import compare, gil_arms

    found = gil_arms([r.run for arm in arms for r in arm.runs])
    if not found:
        return []
    baseline, *others = found
    out: List[dict] = []
    for other in others:
        try:
            result = compare(baseline, other)
        except BadInput as e:
            out.append(dict(a=baseline.name, b=other.name, sections=[], busy="", flagged={},
                            error=str(e)))
            continue
        out.append(_sections(result, result.arm_a, result.arm_b))
    return out


def _row(m, b: str) -> dict:
    ci = "–" if math.isnan(m.low) else f"{fmt(m.low)} – {fmt(m.high)}"
    return dict(metric=m.metric, unit=m.unit, a=fmt(m.median_a), b=fmt(m.median_b),
                ratio=fmt(m.ratio), interval=ci, says=m.says(b), difference=m.difference)
