"""A sweep's points from its axes: the grid (every combination; a `zip` group's axes move
together, one dimension), filtered by `where`, and optionally a seeded random sample. The
grid is counted before it is expanded: a sweep plans at most MAX_POINTS, and a random
sample is drawn from a larger grid without expanding it."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar

from .where import Filter

Values = Dict[str, Any]  # axis key -> the point's value
T = TypeVar("T")
# The most points a sweep plans: the grid's combinations before `where` (each resolved and
# checked before any runs, about 2 ms each), an optuna or random search's `n`, a P/D ratio
# search's capacity searches. Beyond it a sweep would run for days (or, at 10**8, not fit
# in memory): narrow the axes, or let an optuna or random search draw from them.
MAX_POINTS = 10_000
# A random search's draws from a grid of more than MAX_POINTS that a `where` filters: at
# most this many looked at (about 1.5 s in all) for the `n` it keeps.
MAX_DRAWS = 100_000


def grid(axes: Mapping[str, Sequence[Any]], zips: Sequence[Sequence[str]] = ()) -> List[Values]:
    """Every combination of the axes' values, the first axis varying slowest; the axes of a
    zip group take their i-th values together (one dimension, placed where the first of
    them is among the axes). The caller has checked a group's axes exist and have equal
    lengths."""
    values = [[{k: axes[k][i] for k in group} for i in range(len(axes[group[0]]))]
              for group in dimensions(axes, zips)]
    return [{k: merged[k] for k in axes}
            for merged in ({k: v for d in combo for k, v in d.items()}
                           for combo in itertools.product(*values))]


def at(axes: Mapping[str, Sequence[Any]], zips: Sequence[Sequence[str]], index: int) -> Values:
    """grid(axes, zips)[index], without making the grid: `index` read in mixed radix, the
    last dimension's digit the fastest."""
    chosen: Values = {}
    for group in reversed(dimensions(axes, zips)):
        index, i = divmod(index, len(axes[group[0]]))
        chosen.update((k, axes[k][i]) for k in group)
    return {k: chosen[k] for k in axes}


def count(axes: Mapping[str, Sequence[Any]], zips: Sequence[Sequence[str]] = ()) -> int:
    """How many combinations grid() would make, without making them."""
    return math.prod(len(axes[group[0]]) for group in dimensions(axes, zips))


def dimensions(axes: Mapping[str, Sequence[Any]],
               zips: Sequence[Sequence[str]] = ()) -> List[Tuple[str, ...]]:
    """The grid's dimensions in order: each an axis alone, or a zip group's axes."""
    group_of = {key: tuple(group) for group in zips for key in group}
    found: List[Tuple[str, ...]] = []
    placed: Set[str] = set()
    for key in axes:
        if key not in placed:
            found.append(group_of.get(key, (key,)))
            placed.update(found[-1])
    return found


def kept(points: List[Values], where: Optional[Filter]) -> List[Values]:
    return points if where is None else [p for p in points if where(p)]


def sample(points: List[T], n: int, seed: int) -> List[T]:
    """`n` of the points (all of them if fewer), drawn without replacement by `seed`, in
    the grid's order."""
    if n >= len(points):
        return points
    chosen = sorted(random.Random(seed).sample(range(len(points)), n))
    return [points[i] for i in chosen]


def drawn(axes: Mapping[str, Sequence[Any]], zips: Sequence[Sequence[str]], n: int, seed: int,
          where: Optional[Filter]) -> List[Values]:
    """A random search's points: `n` of the grid's combinations that `where` keeps (all of
    them if fewer), drawn without replacement by `seed`, in the grid's order. Without a
    `where`, the indices are those sample() draws from the grid expanded, whatever its
    size; a grid of at most MAX_POINTS is filtered first, as sample() has always had it. A
    larger grid is never expanded: its indices are drawn one by one and each kept where
    `where` holds, until `n` are kept or MAX_DRAWS (or every index) were looked at."""
    total = count(axes, zips)
    if total <= MAX_POINTS:
        return sample(kept(grid(axes, zips), where), n, seed)
    rng = random.Random(seed)
    if where is None:
        return [at(axes, zips, i) for i in sorted(rng.sample(range(total), n))]
    seen: Set[int] = set()
    found: Dict[int, Values] = {}
    while len(found) < n and len(seen) < min(total, MAX_DRAWS):
        i = rng.randrange(total)
        if i not in seen:
            seen.add(i)
            values = at(axes, zips, i)
            if where(values):
                found[i] = values
    return [found[i] for i in sorted(found)]
