"""The Pareto front of a sweep's points: per group, the done points that no other point of
the group beats on both output tokens/s per device and tokens/s per user (docs/sweeps.md,
"The Pareto front")."""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

Pair = Tuple[float, float]  # (output tokens/s per device, tokens/s per user)


def front(groups: Sequence[str], pairs: Sequence[Pair], eligible: Sequence[bool]) -> List[bool]:
    """Each point on its group's front: eligible, both values finite, and no eligible point
    of its group at least as high on both and higher on one."""
    def ok(i: int) -> bool:
        return eligible[i] and all(math.isfinite(v) for v in pairs[i])

    def beats(j: int, i: int) -> bool:
        (a, b), (c, d) = pairs[j], pairs[i]
        return a >= c and b >= d and (a > c or b > d)

    return [ok(i) and not any(ok(j) and groups[j] == groups[i] and beats(j, i)
                              for j in range(len(pairs)))
            for i in range(len(pairs))]
