"""The highest rate at which a probe still meets its target: bracket, then bisect.

From a starting rate the search doubles the rate until a probe misses, or halves it until
one meets, never past the lowest or highest rate allowed. That brackets the capacity
between the highest rate that met and the lowest rate above it that missed; bisection (at
the bracket's geometric mean) then narrows it until high / low <= 1 + resolution.

Every rate that met lies below every rate that missed (each probe lands inside the bracket
and moves one of its ends). The answer is exact where the target is met below some rate
and missed above it; where attainment is not monotone in the rate, the bracket is one
crossing of the target, not necessarily the lowest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

STEPS = 10  # doublings or halvings from the start by default: a factor of 1024 either way


@dataclass(frozen=True)
class Probe:
    rate: float
    met: bool
    result: Any  # what the probe returned beside its verdict


@dataclass(frozen=True)
class Search:
    probes: Tuple[Probe, ...]  # in the order they ran
    low: Optional[float]  # the highest rate found meeting the target; None: none met
    high: Optional[float]  # the lowest rate above `low` that missed; None: none missed

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


def search(probe: Callable[[float], Tuple[bool, Any]], start: float, resolution: float,
           lowest: Optional[float] = None, highest: Optional[float] = None) -> Search:
    """`probe(rate)` -> (met, result), from `start` within `bounds(start, lowest, highest)`,
    until the bracket is within `resolution` (> 0)."""
    lowest, highest = bounds(start, lowest, highest)
    if not resolution > 0:
        raise ValueError(f"expected a resolution > 0, got {resolution!r}")
    probes: List[Probe] = []

    def met(rate: float) -> bool:
        verdict, result = probe(rate)
        probes.append(Probe(rate, bool(verdict), result))
        return bool(verdict)

    rate = start
    low: Optional[float] = None
    high: Optional[float] = None
    if met(rate):
        low = rate
        while high is None and rate < highest:
            rate = min(rate * 2, highest)
            if met(rate):
                low = rate
            else:
                high = rate
    else:
        high = rate
        while low is None and rate > lowest:
            rate = max(rate / 2, lowest)
            if met(rate):
                low = rate
            else:
                high = rate
    while low is not None and high is not None and high / low > 1 + resolution:
        mid = math.sqrt(low * high)
        if met(mid):
            low = mid
        else:
            high = mid
    return Search(tuple(probes), low, high)
