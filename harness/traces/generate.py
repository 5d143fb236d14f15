"""Generated traces: arrival schedules and request-length distributions.

Arrivals follow vLLM's benchmark: "poisson" (exponential gaps of mean 1/rate), "gamma" with
shape = burstiness and scale = 1 / (rate * burstiness), so the mean gap stays 1/rate and
the squared coefficient of variation of the gaps is 1/burstiness (< 1 is burstier; 1 is
Poisson), and "constant" (gaps of exactly 1/rate). The first request arrives at 0.0.

Arrivals and lengths draw from separate seeds (as MLPerf LoadGen does): changing length_seed
never moves an arrival, and changing arrival_seed never changes a length.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from .read import TraceError

ARRIVALS = ("poisson", "gamma", "constant")
MAX_LENGTH = 2 ** 30 - 1  # tokens: engine.MAX_SEQ_TOKENS, the longest sequence a scheduler takes
MAX_REQUESTS = 10 ** 9  # a billion requests: far beyond what a replay holds in memory


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution; build one with fixed, uniform, lognormal or sampled_from."""
    kind: str
    value: int = 0                 # fixed
    lo: int = 1                    # uniform bounds, lognormal clip (inclusive)
    hi: int | None = None
    mu: float = 0.0                # lognormal: log of the median
    sigma: float = 0.0
    values: tuple = ()             # sampled_from

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            assert self.hi is not None  # uniform() sets it
            return rng.integers(self.lo, self.hi + 1, size=n, dtype=np.int64)
        if self.kind == "lognormal":
            x = np.rint(rng.lognormal(self.mu, self.sigma, size=n))
            return np.clip(x, self.lo, MAX_LENGTH if self.hi is None else self.hi).astype(np.int64)
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)


def _real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _int(name, v, lo=1, hi=MAX_LENGTH):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
        raise TraceError(f"{name}: expected an integer in {lo}..{hi}, got {v!r}")
    return int(v)


def fixed(value) -> LengthDist:
    """Every request has `value` tokens."""
    return LengthDist("fixed", value=_int("fixed(value)", value))


def uniform(lo, hi) -> LengthDist:
    """Integers drawn uniformly from lo..hi, both included."""
    lo, hi = _int("uniform(lo)", lo), _int("uniform(hi)", hi)
    if hi < lo:
        raise TraceError(f"uniform(lo, hi): expected lo <= hi, got {lo} > {hi}")
    return LengthDist("uniform", lo=lo, hi=hi)


def lognormal(*, median=None, mean=None, sigma, lo=1, hi=None) -> LengthDist:
    """Lognormal lengths given the median or the mean (before clipping) and sigma (of the log),
    rounded to integers and clipped to lo..hi (hi: MAX_LENGTH when not given). Clipping moves
    the mean; trace_stats shows it."""
    if (median is None) == (mean is None):
        raise TraceError("lognormal: give exactly one of median and mean")
    center = median if median is not None else mean
    if not (_real(center) and math.isfinite(center) and 0 < center <= MAX_LENGTH):
        raise TraceError(f"lognormal: median/mean must be a number in (0, {MAX_LENGTH}], got "
                         f"{center!r}")
    if not (_real(sigma) and math.isfinite(sigma) and sigma >= 0):
        raise TraceError(f"lognormal: sigma must be a number >= 0, got {sigma!r}")
    lo = _int("lognormal(lo)", lo)
    if hi is not None and _int("lognormal(hi)", hi) < lo:
        raise TraceError(f"lognormal: expected lo <= hi, got {lo} > {hi}")
    mu = math.log(center) - (sigma ** 2 / 2 if mean is not None else 0.0)
    return LengthDist("lognormal", lo=lo, hi=hi, mu=mu, sigma=float(sigma))


def sampled_from(values) -> LengthDist:
    """Lengths drawn with replacement from observed ones, e.g. a trace's df.prompt_len."""
    v = np.asarray(values)
    if v.ndim != 1 or len(v) == 0:
        raise TraceError("sampled_from: expected a non-empty 1-D sequence of lengths")
    if not np.issubdtype(v.dtype, np.number) or not np.all(np.isfinite(v)) \
            or np.any(v != np.floor(v)) or v.min() < 1:
        raise TraceError("sampled_from: expected integer lengths >= 1")
    return LengthDist("sampled", values=tuple(int(x) for x in v))


def generate(n=None, rate=1.0, arrival="poisson", burstiness=1.0, *, prompt: LengthDist,
             output: LengthDist, arrival_seed=0, length_seed=0, duration_s=None) -> pd.DataFrame:
    """A trace frame (arrival_s, prompt_len, max_new_tokens) of n requests, or of those arriving
    before duration_s, or of the first n of those when both are given. rate is in requests/s;
    rate=inf (with n) puts every request at 0.0."""
    if n is None and duration_s is None:
        raise TraceError("generate: give n, duration_s or both")
    if n is not None:
        n = _int("n", n, hi=MAX_REQUESTS)
    if arrival not in ARRIVALS:
        raise TraceError(f"arrival: expected one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if not (_real(rate) and rate > 0 and not math.isnan(rate)):
        raise TraceError(f"rate: expected a number of requests/s > 0, got {rate!r}")
    if math.isinf(rate) and n is None:
        raise TraceError("rate=inf puts every request at 0.0: give n, not duration_s")
    if not (_real(burstiness) and math.isfinite(burstiness) and burstiness > 0):
        raise TraceError(f"burstiness: expected a number > 0, got {burstiness!r}")
    if burstiness != 1.0 and arrival != "gamma":
        raise TraceError(f"burstiness={burstiness:g} needs arrival='gamma' (poisson is burstiness 1)")
    if duration_s is not None and not (_real(duration_s) and math.isfinite(duration_s)
                                       and duration_s > 0):
        raise TraceError(f"duration_s: expected a number of seconds > 0, got {duration_s!r}")
    for name, dist in (("prompt", prompt), ("output", output)):
        if not isinstance(dist, LengthDist):
            raise TraceError(f"{name}: expected a LengthDist (fixed, uniform, lognormal, "
                             f"sampled_from), got {type(dist).__name__}")
    arrival_s = _arrivals(n, float(rate), arrival, float(burstiness), arrival_seed, duration_s)
    k = len(arrival_s)
    prompt_rng, output_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(length_seed).spawn(2))
    return pd.DataFrame({"arrival_s": arrival_s, "prompt_len": prompt.sample(k, prompt_rng),
                         "max_new_tokens": output.sample(k, output_rng)})


def _arrivals(n, rate, arrival, burstiness, seed, duration_s) -> np.ndarray:
    if math.isinf(rate):
        return np.zeros(n)
    if arrival == "constant":
        count = n if duration_s is None else math.ceil(duration_s * rate)
        t = np.arange(count if n is None else min(n, count)) / rate
        return t[t < duration_s] if duration_s is not None else t
    rng = np.random.default_rng(seed)
    gaps = []
    total, want = 0.0, n if n is not None else max(16, int(duration_s * rate * 1.2) + 16)
    while True:  # draw gaps in chunks until n requests or duration_s are covered
        g = (rng.exponential(1 / rate, want) if arrival == "poisson"
             else rng.gamma(burstiness, 1 / (rate * burstiness), want))
        gaps.append(g)
        total += g.sum()
        have = sum(len(x) for x in gaps) + 1
        if (n is not None and have >= n) or (duration_s is not None and total >= duration_s):
            break
        want = max(16, want // 2)
    t = np.concatenate([[0.0], np.cumsum(np.concatenate(gaps))])
    if duration_s is not None:
        t = t[t < duration_s]
    return t[:n] if n is not None else t


def longest(spec) -> Optional[int]:
    """The longest length a checked length spec draws; None where it has no bound
    (lognormal without a max)."""
    (kind, arg), = spec.items()
    return arg if kind == "fixed" else arg[1] if kind == "uniform" else arg.get("max")


def length_dist(spec) -> LengthDist:
    """The arrivals.LengthDist a checked `{fixed: N}`, `{uniform: [LO, HI]}` or `{lognormal:
    {...}}` names."""

    (kind, arg), = spec.items()
    if kind == "fixed":
        return fixed(arg)
    if kind == "uniform":
        return uniform(*arg)
    return lognormal(median=arg["median"], sigma=arg["sigma"], lo=arg.get("min", 1),
                              hi=arg.get("max"))
