"""The ratio of two arms' medians with its bootstrap interval, runs as the unit, and the
A/A noise floor of an arm (docs/comparing.md).

A run is one sample: the steps and requests inside a run are autocorrelated (a queue
builds and drains), so resampling them as if independent would give intervals far too
narrow. Resampling whole runs is honest and needs several runs per arm.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
from numpy.typing import ArrayLike

MIN_RUNS = 3        # fewer runs in an arm: no interval
MIN_RUNS_AA = 4     # an arm's A/A split needs two halves of at least two runs
CONFIDENCE = 0.95
RESAMPLES = 4999
SEED = 0            # the same runs give the same interval


@dataclass(frozen=True)
class Ratio:
    """median(b) / median(a) and its interval; low and high are NaN without one."""

    ratio: float
    low: float = math.nan
    high: float = math.nan

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    @property
    def excludes_one(self) -> bool:
        return self.has_interval and (self.low > 1 or self.high < 1)

    @property
    def spread(self) -> float:
        """How far the interval reaches from 1 as a factor either way, minus 1 (0.04: ±4 %,
        a ratio within 1/1.04 .. 1.04); NaN without an interval. A factor, not a
        difference: an A/A interval of 0.2 .. 4.6 is ±360 %, and a ratio of 0.02 lies
        beyond it (a difference from 1 could never exceed 100 % downwards)."""
        if not self.has_interval:
            return math.nan
        return max(1 / self.low if self.low > 0 else math.inf, self.high) - 1

    def beyond(self, spread: float) -> bool:
        """The ratio is further from 1 than `spread` (a factor as `spread` says)."""
        if self.ratio <= 0:
            return True
        return abs(math.log(self.ratio)) > math.log1p(spread)


def _median_ratio(a, b, axis=-1):
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def ratio(a: ArrayLike, b: ArrayLike, min_runs: int = MIN_RUNS,
          batch: Optional[int] = None) -> Ratio:
    """The ratio of medians, with its 95 % percentile-bootstrap interval (scipy's
    stats.bootstrap, the two arms resampled independently) when each arm has at least
    `min_runs` values. NaN values are left out; a zero median in `a`, or a median or
    ratio past the largest double, gives NaN; an interval with an end past it, none.
    `batch`: resamples drawn at once (None: all), to bound the memory of long samples."""
    a, b = _finite(a), _finite(b)
    if not len(a) or not len(b):
        return Ratio(math.nan)
    with np.errstate(over="ignore", invalid="ignore"):  # values near the largest double
        medians = float(np.median(a)), float(np.median(b))
        point = medians[1] / medians[0] if medians[0] else math.nan
        identical = np.ptp(a) == 0 and np.ptp(b) == 0
    if not (math.isfinite(point) and all(map(math.isfinite, medians))):
        return Ratio(math.nan)
    if min(len(a), len(b)) < min_runs:
        return Ratio(point)
    if identical:  # identical runs (a modeled run): no spread at all
        return Ratio(point, point, point)
    from scipy import stats  # seconds to import: only where an interval is drawn
    with warnings.catch_warnings(), np.errstate(over="ignore", divide="ignore",
                                                invalid="ignore"):
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)  # a zero median in a resample
        result = stats.bootstrap((a, b), _median_ratio, vectorized=True, paired=False,
                                 confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                                 batch=batch, method="percentile",
                                 rng=np.random.default_rng(SEED))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):  # a resample's median 0 or past a double
        return Ratio(point)
    return Ratio(point, low, high)


def noise_floor(values: ArrayLike) -> Optional[Ratio]:
    """The A/A ratio of one arm: its even-numbered runs against its odd-numbered ones
    (interleaved, so a drift over the sweep falls on both halves), with the interval. None
    with fewer than MIN_RUNS_AA values."""
    v = _finite(values)
    if len(v) < MIN_RUNS_AA:
        return None
    return ratio(v[0::2], v[1::2], min_runs=2)


def _finite(values) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return v[np.isfinite(v)]
