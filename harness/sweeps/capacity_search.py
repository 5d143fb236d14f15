"""The highest rate at which a probe still meets its target: bracket, then bisect.

From a starting rate the search doubles the rate until a probe misses, or halves it until
one meets, never past the lowest or highest rate allowed. That brackets the capacity
between the highest rate that met and the lowest rate above it that missed; bisection (at
the bracket's geometric mean) then narrows it until high / low <= 1 + resolution.

Every rate that met lies below every rate that missed (each probe lands inside the bracket
and moves one of its ends), so no rate is probed twice. The answer is exact where the
target is met below some rate and missed above it; where attainment is not monotone in the
rate, the bracket is one crossing of the target, not necessarily the lowest.

The search is bounded whatever its arguments: it ends after `max_probes` probes, and when
the bracket's ends are adjacent doubles (no rate lies between them, whatever the
resolution asked).

`search_integers` is the same search over whole numbers (a closed loop's requests in
flight): halving rounds down, never below 1; bisection takes the bracket's integer midpoint
and ends when high / low <= 1 + resolution or the ends are adjacent integers, where the
answer is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

STEPS = 10  # doublings or halvings from the start by default: a factor of 1024 either way
# The finest resolution a capacity search takes (docs/capacity.md, "Bounds"): bisecting a
# factor of 2 down to it takes 20 probes.
MIN_RESOLUTION = 1e-6
# More than any search within the default bounds needs at MIN_RESOLUTION: the start,
# STEPS doublings or halvings and 20 bisections.
MAX_PROBES = 40


@dataclass(frozen=True)
class Probe:
    rate: float  # the value probed: a rate, or an integer in search_integers
    met: bool
    result: Any  # what the probe returned beside its verdict


@dataclass(frozen=True)
class Search:
    probes: Tuple[Probe, ...]  # in the order they ran
    low: Optional[float]  # the highest rate found meeting the target; None: none met
    high: Optional[float]  # the lowest rate above `low` that missed; None: none missed
    out_of_probes: bool = False  # it stopped at max_probes with another rate to probe

    @property
    def found(self) -> bool:
        """The capacity is bracketed: a rate met and one above it missed."""
        return self.low is not None and self.high is not None

    def at(self, rate: Optional[float]) -> Optional[Probe]:
        """The (last) probe run at `rate`; None for None."""
        return next((p for p in reversed(self.probes) if p.rate == rate), None)


def bounds(start: float, lowest: Optional[float] = None,
           highest: Optional[float] = None) -> Tuple[float, float]:
    """The lowest and highest rates to probe: as given, else start / 2**STEPS and
    start * 2**STEPS; ValueError unless 0 < lowest <= start <= highest < inf."""
    lowest = start / 2 ** STEPS if lowest is None else lowest
    highest = start * 2 ** STEPS if highest is None else highest
    if not (0 < lowest <= start <= highest < math.inf):
        raise ValueError(f"the rates to probe must hold the starting rate {start:g} req/s: "
                         f"expected 0 < lowest <= {start:g} <= highest (finite), got lowest "
                         f"{lowest:g}, highest {highest:g}")
    return lowest, highest


def integer_bounds(start: int, lowest: Optional[float] = None,
                   highest: Optional[float] = None) -> Tuple[int, int]:
    """The lowest and highest integers to probe: as given, else 1 and start * 2**STEPS;
    ValueError unless they are whole numbers with 1 <= lowest <= start <= highest."""
    lowest = 1 if lowest is None else lowest
    highest = start * 2 ** STEPS if highest is None else highest
    whole = all(math.isfinite(v) and v == int(v) for v in (lowest, highest))
    if not (whole and 1 <= lowest <= start <= highest):
        raise ValueError(f"the requests in flight to probe must hold the starting {start}: "
                         f"expected whole numbers 1 <= lowest <= {start} <= highest, got "
                         f"lowest {lowest:g}, highest {highest:g}")
    return int(lowest), int(highest)


def search(probe: Callable[[float], Tuple[bool, Any]], start: float, resolution: float,
           lowest: Optional[float] = None, highest: Optional[float] = None,
           max_probes: int = MAX_PROBES) -> Search:
    """`probe(rate)` -> (met, result), from `start` within `bounds(start, lowest, highest)`,
    until the bracket is within `resolution` (> 0), its ends are adjacent doubles, or
    `max_probes` (>= 1) probes have run."""
    lowest, highest = bounds(start, lowest, highest)
    return _search(probe, start, resolution, lowest, highest, max_probes, _next)


def search_integers(probe: Callable[[int], Tuple[bool, Any]], start: int, resolution: float,
                    lowest: Optional[float] = None, highest: Optional[float] = None,
                    max_probes: int = MAX_PROBES) -> Search:
    """`probe(n)` -> (met, result) for whole numbers n, from `start` within
    `integer_bounds(start, lowest, highest)`, until the bracket is within `resolution`
    (> 0), its ends are adjacent integers, or `max_probes` (>= 1) probes have run."""
    low, high = integer_bounds(start, lowest, highest)
    return _search(probe, start, resolution, low, high, max_probes, _next_integer)


def _search(probe, start, resolution, lowest, highest, max_probes, next_) -> Search:
    if not resolution > 0:
        raise ValueError(f"expected a resolution > 0, got {resolution!r}")
    if not max_probes >= 1:
        raise ValueError(f"expected max_probes >= 1, got {max_probes!r}")
    probes: List[Probe] = []
    low: Optional[float] = None
    high: Optional[float] = None
    rate: Optional[float] = start
    while rate is not None and len(probes) < max_probes:
        verdict, result = probe(rate)
        probes.append(Probe(rate, bool(verdict), result))
        if verdict:
            low = rate
        else:
            high = rate
        rate = next_(low, high, lowest, highest, resolution)
    return Search(tuple(probes), low, high, out_of_probes=rate is not None)


def _next(low: Optional[float], high: Optional[float], lowest: float, highest: float,
          resolution: float) -> Optional[float]:
    """The rate to probe after the bracket (low, high); None when the search is done."""
    if high is None:  # every rate so far met, the last one the highest
        assert low is not None  # a probe set one end or the other
        return min(low * 2, highest) if low < highest else None
    if low is None:  # every rate so far missed, the last one the lowest
        return max(high / 2, lowest) if high > lowest else None
    if high / low <= 1 + resolution:
        return None
    mid = math.sqrt(low) * math.sqrt(high)  # low * high may overflow
    return mid if low < mid < high else None  # adjacent doubles: nothing lies between


def _next_integer(low: Optional[int], high: Optional[int], lowest: int, highest: int,
                  resolution: float) -> Optional[int]:
    """The integer to probe after the bracket (low, high); None when the search is done."""
    if high is None:
        assert low is not None
        return min(low * 2, highest) if low < highest else None
    if low is None:
        return max(high // 2, lowest) if high > lowest else None
    if high - low <= 1 or high / low <= 1 + resolution:
        return None
    return (low + high) // 2  # strictly inside: high - low >= 2
