"""A device's throughput-interactivity front and its readings at equal interactivity
(docs/frontier.md, "The front and its readings"): the upper envelope of its run points
(tokens/s per user, tokens/s per device), read at a level of tokens/s per user by linear
interpolation between the two measured points around it, never beyond them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Point:
    """One run point: x tokens/s per user, y tokens/s per device (or per kW, per $/h: `per`);
    an ineligible one (no steady window, failed) keeps its reason."""

    x: float
    y: float
    label: str
    eligible: bool = True
    reason: str = ""


@dataclass(frozen=True)
class Front:
    """The envelope, x ascending and y descending; the points left off it as ineligible,
    with their reasons (the dominated ones are neither)."""

    points: Tuple[Point, ...]
    left_off: Tuple[Point, ...] = ()


@dataclass(frozen=True)
class Reading:
    """The front's y at x = `level`: `value` within [`low`, `high`], the right neighbour's y
    and the left's; `left` and `right` the measured points around the level (both the same
    point on it). Without a value (`value` NaN, neighbours None) `reason` says why."""

    level: float
    value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    left: Optional[Point] = None
    right: Optional[Point] = None
    reason: str = ""

    @property
    def found(self) -> bool:
        return not math.isnan(self.value)


@dataclass(frozen=True)
class Ratio:
    """a / b of two readings, within [low_a / high_b, high_a / low_b]; NaN with `reason`
    where either has no value."""

    value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    reason: str = ""


def envelope(points: Iterable[Point]) -> Front:
    """The points no other eligible point beats on both x and y (at least as high on both,
    higher on one), x ascending (then y descending); ineligible points and those with a
    non-finite x or y are left off, with their reasons. Equal points are all kept."""
    points = list(points)
    usable = [p.eligible and math.isfinite(p.x) and math.isfinite(p.y) for p in points]
    ok = [p for p, u in zip(points, usable) if u]
    left_off = [p if not p.eligible else replace(
        p, eligible=False, reason=f"not a number: {p.x} tok/s per user, {p.y} per device")
        for p, u in zip(points, usable) if not u]
    front = [p for p in ok if not any(_beats(q, p) for q in ok)]
    return Front(tuple(sorted(front, key=lambda p: (p.x, -p.y))), tuple(left_off))


def _beats(a: Point, b: Point) -> bool:
    return a.x >= b.x and a.y >= b.y and (a.x > b.x or a.y > b.y)


def read(front: Front, level: float) -> Reading:
    """The front's y at x = `level`: on a point, that point (a zero-width interval); between
    two, the straight line between them, within their ys. Below the slowest point or above
    the fastest: no value (never extrapolated)."""
    points = front.points
    if not points:
        return Reading(level, reason="no eligible point: the front is empty")
    if not math.isfinite(level):
        return Reading(level, reason=f"the level {level} is not a number")
    if level < points[0].x:
        return Reading(level, reason=f"below the slowest point, {points[0].x:.1f} tok/s per "
                                     f"user ({points[0].label})")
    if level > points[-1].x:
        return Reading(level, reason=f"above the fastest point, {points[-1].x:.1f} tok/s per "
                                     f"user ({points[-1].label})")
    at = next((p for p in points if p.x == level), None)
    if at is not None:
        return Reading(level, at.y, at.y, at.y, at, at)
    right = next(i for i, p in enumerate(points) if p.x > level)
    a, b = points[right - 1], points[right]
    value = a.y + (b.y - a.y) * (level - a.x) / (b.x - a.x)
    return Reading(level, min(max(value, b.y), a.y), b.y, a.y, a, b)  # rounding stays inside


def ratio(a: Reading, b: Reading) -> Ratio:
    """a's value over b's, within [a.low / b.high, a.high / b.low] (b.low 0: no upper bound)."""
    missing = [f"{name} at {r.level:g} tok/s per user: {r.reason}"
               for name, r in (("a", a), ("b", b)) if not r.found]
    if missing:
        return Ratio(reason="; ".join(missing))
    if b.value <= 0:
        return Ratio(reason=f"b reads {b.value:g} at {b.level:g} tok/s per user: nothing to "
                            f"divide by")
    return Ratio(a.value / b.value, a.low / b.high, a.high / b.low if b.low > 0 else math.inf)


def per(points: Sequence[Point], divisors: Sequence[float], what: str) -> List[Point]:
    """The points with y over a per-point divisor (power in kW: tokens/s per kW; a price in
    $/h: per $/h); a point whose divisor is not a positive number is ineligible, `what` (the
    divisor's name) in its reason."""
    if len(points) != len(divisors):
        raise ValueError(f"{len(points)} points but {len(divisors)} {what} figures")
    return [replace(p, y=p.y / d) if math.isfinite(d) and d > 0 else
            replace(p, y=math.nan, eligible=False, reason=p.reason or f"no {what}")
            for p, d in zip(points, divisors)]
