"""A shape's time on a curve of a kernel table, by the one interpolation rule
(docs/modeling.md, "Kernel tables"); csrc/kernel_curve.cpp is the step's fast twin, held
to this one by tests/test_kernel_tables.py.

- tokens: log-log between the two measured tokens around it; below the smallest, the
  smallest's time (no kernel is faster than its smallest measured shape); above the
  largest, the last two rows' line (each token past them costs what the last ones did),
  or in proportion to tokens where that line does not rise;
- context: linear between the two measured contexts around it; below the smallest, the
  smallest's; above the largest, the last two's line;
- 0 tokens take no time; any other shape outside the rows is `extrapolated`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Sequence, Tuple

from .table import KernelTable, Row


@dataclass(frozen=True)
class Curve:
    tokens: Tuple[int, ...]  # ascending
    contexts: Tuple[int, ...]  # ascending
    times_us: Tuple[Tuple[float, ...], ...]  # [context][tokens]

    @classmethod
    def of(cls, rows: Sequence[Row]) -> "Curve":
        tokens = sorted({r.tokens for r in rows})
        contexts = sorted({r.context for r in rows})
        at = {(r.context, r.tokens): r.time_us for r in rows}
        return cls(tuple(tokens), tuple(contexts),
                   tuple(tuple(at[c, t] for t in tokens) for c in contexts))

    def at(self, tokens: float, context: float = 0) -> Tuple[float, bool]:
        """Microseconds at (tokens, context), and whether that lies outside the rows."""
        if tokens <= 0:
            return 0.0, False
        c = self.contexts
        if len(c) == 1 or context <= c[0]:
            time, outside = self._in_tokens(0, tokens)
            return time, outside or (context != c[0])
        j = min(bisect.bisect_left(c, context), len(c) - 1)  # c[j - 1] < context <= c[j]
        lo, out_lo = self._in_tokens(j - 1, tokens)
        hi, out_hi = self._in_tokens(j, tokens)
        f = (context - c[j - 1]) / (c[j] - c[j - 1])
        return lo + f * (hi - lo), out_lo or out_hi or context > c[-1]

    def _in_tokens(self, row: int, tokens: float) -> Tuple[float, bool]:
        t, times = self.tokens, self.times_us[row]
        if tokens <= t[0]:
            return times[0], tokens < t[0]
        if tokens >= t[-1]:
            return _past(t, times, tokens), tokens > t[-1]
        i = bisect.bisect_right(t, tokens)  # t[i - 1] <= tokens < t[i]
        f = math.log(tokens / t[i - 1]) / math.log(t[i] / t[i - 1])
        return math.exp(math.log(times[i - 1]) + f * math.log(times[i] / times[i - 1])), False


def _past(t: Tuple[int, ...], times: Tuple[float, ...], tokens: float) -> float:
    slope = (times[-1] - times[-2]) / (t[-1] - t[-2]) if len(t) > 1 else 0.0
    if slope <= 0:
        return times[-1] * tokens / t[-1]
    return times[-1] + slope * (tokens - t[-1])


@lru_cache(maxsize=64)
def curves_of(table: KernelTable) -> Dict[Tuple, Curve]:
    """Each curve of `table`, by its keys (table.CURVE_KEYS); worked out once a table (a
    sweep builds many engines on one)."""
    return {key: Curve.of(rows) for key, rows in table.curves().items()}
