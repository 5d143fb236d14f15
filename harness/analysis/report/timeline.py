"""Timelines for drawing: per-step values aggregated over DP ranks, then averaged into a
bounded number of time bins. Statistics never use the binned values."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np

BINS = 1500  # points a drawn timeline keeps, whatever the run's length


def per_step(step: np.ndarray, values: Dict[str, np.ndarray], how: str = "sum",
             idle: Optional[Dict[str, np.ndarray]] = None):
    """Rows of the steps table (one per step and DP rank with a row) to one value per step:
    `sum` over ranks, or `first` (times that repeat on every row of a step). `idle`: per
    row, what the step's left-out idle ranks add to a sum (the same on each of its rows:
    RunData.idle_sums). Returns (steps, values)."""
    steps, first, inverse = np.unique(step, return_index=True, return_inverse=True)
    if how == "first":
        return steps, {k: np.asarray(v, np.float64)[first] for k, v in values.items()}
    added = {k: np.asarray(v, np.float64)[first] for k, v in (idle or {}).items()}
    return steps, {k: np.bincount(inverse, weights=np.asarray(v, np.float64),
                                  minlength=len(steps)) + added.get(k, 0.0)
                   for k, v in values.items()}


def binned(t: np.ndarray, values: Dict[str, np.ndarray], bins: int = BINS,
           reduce: str = "mean"):
    """(bin centres, {name: per-bin mean or sum}) over equal time bins, at most one bin per
    two samples; a mean leaves out empty bins (the line joins across them), a sum keeps
    them as 0 (no work done)."""
    t = np.asarray(t, np.float64)
    if len(t) == 0:
        return t, {k: np.asarray(v, np.float64) for k, v in values.items()}
    lo, hi = float(np.nanmin(t)), float(np.nanmax(t))
    n = max(1, min(bins, len(t) // 2))
    edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, n + 1)
    index = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    count = np.bincount(index, minlength=n)
    keep = np.ones(n, bool) if reduce == "sum" else count > 0
    out = {}
    for k, v in values.items():
        total = np.bincount(index, weights=np.asarray(v, np.float64), minlength=n)[keep]
        out[k] = total if reduce == "sum" else total / count[keep]
    return ((edges[:-1] + edges[1:]) / 2)[keep], out


def held_sum(series: Sequence[tuple], bins: int = BINS):
    """Several instances' per-step states, [(t, {name: values})], as one timeline: (bin
    centres, {name: per-bin sum over the instances}). Each instance's value is averaged
    per bin as `binned` does, and held through the bins in which it ran no step (a state
    holds until a step changes it; before its first step, its first value), so that an
    idle instance still counts."""
    t_all = np.concatenate([np.asarray(t, np.float64) for t, _ in series]) if series else \
        np.zeros(0)
    names = list(series[0][1]) if series else []
    if len(t_all) == 0:
        return t_all, {k: np.zeros(0) for k in names}
    lo, hi = float(np.nanmin(t_all)), float(np.nanmax(t_all))
    n = max(1, min(bins, len(t_all) // 2))
    edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, n + 1)
    out = {k: np.zeros(n) for k in names}
    for t, values in series:
        index = np.clip(np.searchsorted(edges, np.asarray(t, np.float64), side="right") - 1,
                        0, n - 1)
        count = np.bincount(index, minlength=n)
        ran = np.flatnonzero(count)
        if not len(ran):
            continue
        last = np.maximum.accumulate(np.where(count > 0, np.arange(n), -1))
        last[last < 0] = ran[0]  # before its first step: its first value
        for k, v in values.items():
            total = np.bincount(index, weights=np.asarray(v, np.float64), minlength=n)
            out[k] += (total / np.maximum(count, 1))[last]
    return (edges[:-1] + edges[1:]) / 2, out


def cdf_points(values: np.ndarray, points: int = 1000):
    """(x, fraction) tracing the empirical CDF of every finite value through `points`
    quantiles: the curve of all samples, drawn with a bounded number of points."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return v, v
    q = np.linspace(0.0, 1.0, min(points, len(v)))
    return np.quantile(v, q), q


def sample(n: int, keep: int, always: Sequence[bool] = ()):
    """Indices of at most `keep` of n points to draw (seeded, so a report is reproducible),
    plus every index where `always` is true."""
    if n <= keep:
        return np.arange(n)
    chosen = np.zeros(n, bool)
    chosen[np.random.default_rng(0).choice(n, keep, replace=False)] = True
    if len(always):
        chosen |= np.asarray(always, bool)
    return np.flatnonzero(chosen)
