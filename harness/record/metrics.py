"""Latency and throughput metrics from per-request records, each defined once: TTFT,
TPOT, ITL, E2E, throughput, goodput and their percentiles, over a whole table or fed a
chunk at a time (LatencySummary).

Definitions, formulas and units: docs/metrics.md, "Latency and throughput". Everything
here is vectorised over requests and tokens (no per-request Python loops).

Inputs (times in seconds on the run's clock):

- `requests`: a DataFrame, one row per request, with the columns of REQUEST_COLUMNS:
  `arrival_s` (intended enqueue time), `enqueue_s` (actual enqueue time),
  `first_scheduled_s` (NaN if never scheduled), `prompt_len`, `output_tokens`, `status`
  (one of STATUSES).
- Token times, in one of two forms. Every token: `token_times` (float64) and
  `token_offsets` (int64, length n + 1), a CSR layout where request i's output tokens were
  committed at `token_times[token_offsets[i]:token_offsets[i + 1]]`, non-decreasing,
  exactly `output_tokens[i]` of them (`per_request`, `summary`). Or what the recorder keeps
  (`latencies`, `summarize`): each request's `first_token_s` and `last_token_s`, and the
  inter-token gaps of the measured, completed requests as distinct values with counts.
- `warmup`: a boolean mask over requests; warm-up requests are left out of everything
  but their own count.

Invariant: for every request with at least two tokens, the mean of its ITL gaps equals
its TPOT (both are (last token - first token) / (output_tokens - 1)).
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Tuple

import numpy as np
import pandas as pd

from ..schema.values import COMPLETED, SLO_METRICS, STATUSES

REQUEST_COLUMNS = ("arrival_s", "enqueue_s", "first_scheduled_s", "prompt_len",
                   "output_tokens", "status")
PERCENTILES = (50, 90, 95, 99)          # numpy's default method, 'linear'
SUMMARY_COLUMNS = ("metric", "stat", "value", "unit")


def check_tokens(token_times, token_offsets, n: Optional[int] = None):
    """The CSR arrays as numpy, after checking their shape and per-request order."""
    times = np.asarray(token_times, dtype=np.float64)
    offsets = np.asarray(token_offsets, dtype=np.int64)
    if offsets.ndim != 1 or len(offsets) < 1 or (n is not None and len(offsets) != n + 1):
        want = "n + 1" if n is None else f"{n + 1}"
        raise ValueError(f"token_offsets must be 1-D with {want} entries, "
                         f"got shape {offsets.shape}")
    if offsets[0] != 0 or offsets[-1] != len(times) or np.any(np.diff(offsets) < 0):
        raise ValueError(f"token_offsets must rise from 0 to len(token_times) = {len(times)}, "
                         f"got {offsets[0]} .. {offsets[-1]} (or a decrease)")
    if not np.all(np.isfinite(times)):
        raise ValueError("token_times holds a NaN or infinite time")
    gaps, owner = _gaps(times, offsets)
    if np.any(gaps < 0):
        i = int(owner[np.argmax(gaps < 0)])
        raise ValueError(f"request {i}: token times go backwards "
                         f"({times[offsets[i]:offsets[i + 1]].tolist()})")
    return times, offsets


def token_bounds(token_times, token_offsets):
    """(first, last) token commit time per request; NaN where a request has no tokens."""
    return _bounds(*check_tokens(token_times, token_offsets))


def _bounds(times, offsets):
    has = np.diff(offsets) > 0
    first = np.full(len(offsets) - 1, np.nan)
    last = first.copy()
    first[has] = times[offsets[:-1][has]]
    last[has] = times[offsets[1:][has] - 1]
    return first, last


def itl(token_times, token_offsets, keep=None):
    """Inter-token latencies: (gaps, request index of each gap), in token order.

    A gap lies between two consecutive tokens of one request: never from arrival to the
    first token (that is TTFT), never across two requests. Tokens committed at the same
    instant (MTP) give zero gaps, which are real samples. `keep` (a boolean mask over
    requests) selects whose gaps to return.
    """
    times, offsets = check_tokens(token_times, token_offsets)
    gaps, owner = _gaps(times, offsets)
    if keep is not None:
        sel = np.asarray(keep, dtype=bool)[owner]
        gaps, owner = gaps[sel], owner[sel]
    return gaps, owner


def _gaps(times, offsets):
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    same = owner[1:] == owner[:-1]  # drops each diff that crosses into another request
    return np.diff(times)[same], owner[1:][same]


def per_request(requests: pd.DataFrame, token_times, token_offsets) -> pd.DataFrame:
    """The requests with first_token_s and last_token_s from the token times, and the
    latencies of `latencies` added."""
    _check_requests(requests)
    n = len(requests)
    times, offsets = check_tokens(token_times, token_offsets, n)
    output_tokens = requests["output_tokens"].to_numpy(dtype=np.int64)
    bad = np.flatnonzero(np.diff(offsets) != output_tokens)
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"request {i}: output_tokens {output_tokens[i]} but "
                         f"{offsets[i + 1] - offsets[i]} token times")
    first, last = _bounds(times, offsets)
    return latencies(requests.assign(first_token_s=first, last_token_s=last))


def latencies(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests (with first_token_s and last_token_s) with ttft_s, tpot_s, e2e_s,
    queueing_delay_s and schedule_fidelity_s added (NaN where undefined), for every status."""
    _check_requests(requests)
    return requests.assign(**latency_columns(
        {name: requests[name].to_numpy() for name in LATENCY_INPUTS}))


LATENCY_INPUTS = ("arrival_s", "enqueue_s", "first_scheduled_s", "first_token_s",
                  "last_token_s", "output_tokens")


def latency_columns(requests: Mapping[str, np.ndarray]) -> dict:
    """`latencies`' columns as numpy arrays, from arrays of LATENCY_INPUTS (unchecked; the
    recorder's path, where a DataFrame would cost more than the arithmetic)."""
    arrival = np.asarray(requests["arrival_s"], dtype=np.float64)
    output_tokens = np.asarray(requests["output_tokens"], dtype=np.int64)
    ttft = np.asarray(requests["first_token_s"], np.float64) - arrival
    e2e = np.asarray(requests["last_token_s"], np.float64) - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output_tokens > 1, (e2e - ttft) / (output_tokens - 1), np.nan)
    return dict(ttft_s=ttft, tpot_s=tpot, e2e_s=e2e,
                queueing_delay_s=np.asarray(requests["first_scheduled_s"], np.float64) - arrival,
                schedule_fidelity_s=np.asarray(requests["enqueue_s"], np.float64) - arrival)


def _check_requests(requests):
    missing = [c for c in REQUEST_COLUMNS if c not in requests.columns]
    if missing:
        raise ValueError(f"requests lacks the columns {missing}")
    bad = np.flatnonzero(~np.isfinite(requests["arrival_s"].to_numpy(np.float64)))
    if len(bad):
        raise ValueError(f"request {bad[0]}: arrival_s is {requests['arrival_s'].iloc[bad[0]]}")
    unknown = sorted(set(requests["status"].astype(str)) - set(STATUSES))
    if unknown:
        raise ValueError(f"unknown status {unknown}; expected one of {STATUSES}")


def measured_window(arrival_s, last_token_s, measured) -> float:
    """Seconds from the first measured arrival to the last measured token (any status);
    NaN when no measured request emitted a token."""
    measured = np.asarray(measured, dtype=bool)
    last = np.asarray(last_token_s, dtype=np.float64)[measured]
    if not measured.any() or np.all(np.isnan(last)):
        return float("nan")
    return float(np.nanmax(last) - np.min(np.asarray(arrival_s, dtype=np.float64)[measured]))


def meets_slo(ttft_s, tpot_s, e2e_s, slo: Mapping[str, float]):
    """Boolean per request: meets every SLO given (seconds; value <= limit). A request
    with one output token has no TPOT (NaN) and meets any TPOT limit; a NaN TTFT or E2E
    (no token) meets none."""
    unknown = set(slo) - set(SLO_METRICS)
    if unknown:
        raise ValueError(f"unknown SLO {sorted(unknown)}; expected some of {SLO_METRICS}")
    values = dict(ttft=ttft_s, tpot=tpot_s, e2e=e2e_s)
    ok = np.ones(len(np.asarray(ttft_s)), dtype=bool)
    for name, limit in slo.items():
        v = np.asarray(values[name], dtype=np.float64)
        met = v <= limit  # NaN compares False
        if name == "tpot":
            met |= np.isnan(v)
        ok &= met
    return ok


def describe(values, counts=None) -> dict:
    """count, mean, min, p50, p90, p95, p99, max of the values, NaN ones left out;
    percentiles by numpy's default 'linear' method. `counts` weighs each value as that many
    samples (the same result as repeating it). All NaN when nothing is left."""
    v = np.asarray(values, dtype=np.float64)
    if counts is None:  # no counts array: a million values are not copied for nothing
        nan = np.isnan(v)
        v = v[~nan] if nan.any() else v
        n = len(v)
        mean = v.mean() if n else np.nan
        pct = np.percentile(v, PERCENTILES) if n else None  # method="linear"
    else:
        c = np.asarray(counts, dtype=np.int64)
        keep = ~np.isnan(v) & (c > 0)
        v, c = v[keep], c[keep]
        order = np.argsort(v, kind="stable")
        v, c = v[order], c[order]
        n = int(c.sum())
        mean = np.dot(v, c) / n if n else np.nan
        pct = _weighted_percentiles(v, np.cumsum(c), PERCENTILES) if n else None
    if n == 0:
        return dict(count=0, mean=np.nan, min=np.nan,
                    **{f"p{p}": np.nan for p in PERCENTILES}, max=np.nan)
    assert pct is not None  # taken whenever n > 0
    return dict(count=n, mean=float(mean), min=v.min(),
                **{f"p{p}": x for p, x in zip(PERCENTILES, pct)}, max=v.max())


def _weighted_percentiles(sorted_values, cumulative, percentiles):
    """np.percentile(np.repeat(values, counts), percentiles) without the repeat."""
    n = cumulative[-1]
    h = (n - 1) * np.asarray(percentiles, dtype=np.float64) / 100
    lo = np.floor(h).astype(np.int64)

    def at(rank):  # the value of the rank-th sample (0-based) of the repeated array
        return sorted_values[np.searchsorted(cumulative, rank, side="right")]

    a, b = at(lo), at(np.minimum(lo + 1, n - 1))
    return a + (b - a) * (h - lo)


def summary(requests: pd.DataFrame, token_times, token_offsets, *, warmup=None,
            slo: Optional[Mapping[str, float]] = None) -> pd.DataFrame:
    """The run's latency and throughput metrics as a tidy long table:
    metric, stat, value, unit; e.g. ("ttft", "p99", 0.123, "s")."""
    req = per_request(requests, token_times, token_offsets)
    warm = _warmup_mask(warmup, len(req))
    done = ~warm & np.isin(req["status"].astype(str).to_numpy(), COMPLETED)
    gaps, owner = _gaps(np.asarray(token_times, np.float64),  # checked by per_request
                        np.asarray(token_offsets, np.int64))
    return summarize(req, gaps[done[owner]], None, warmup=warm, slo=slo)


def summarize(req: pd.DataFrame, itl_values, itl_counts=None, *, warmup=None,
              slo: Optional[Mapping[str, float]] = None) -> pd.DataFrame:
    """summary() from per-request latencies (the columns `latencies` adds) and the
    inter-token gaps of the measured, completed requests (values, with counts or None)."""
    latency = LatencySummary(len(req), slo)
    latency.add(req, _warmup_mask(warmup, len(req)))
    return latency.rows(itl_values, itl_counts)


class LatencySummary:
    """summarize(), fed the requests a chunk at a time (the recorder's path: a million
    requests never sit in one frame). It keeps what exact percentiles need, one value per
    metric of each request counted, and counts and sums for the rest; the rows equal
    summarize()'s over all the chunks as one frame. The values go into arrays sized for
    `capacity` requests up front: pages are touched as they fill, and nothing is copied to
    join them (a long run's parts would fragment the heap)."""

    METRICS = ("ttft", "tpot", "e2e", "queueing_delay", "schedule_fidelity")

    def __init__(self, capacity: int, slo: Optional[Mapping[str, float]] = None) -> None:
        self.slo = slo
        self.counts = dict.fromkeys((*STATUSES, "warmup"), 0)
        self.output_tokens = 0.0  # of measured, completed requests
        self._done = self._good = 0
        self._prompt_tokens = 0.0
        # per chunk: its first measured arrival, its last measured token
        self._ends: List[Tuple[float, float]] = []
        self._values = {m: np.empty(capacity) for m in self.METRICS + ("decode_stall",)}
        self._filled = dict.fromkeys(self.METRICS + ("decode_stall",), 0)
        # decode stall (docs/metrics.md): its sum, and the first-to-last-token spans' sum,
        # over measured completed requests; None while no chunk carried decode_stall_s
        self._stall: Optional[Tuple[float, float]] = None

    def add(self, req, warm) -> None:
        """A chunk of requests: columns (a DataFrame or a mapping of arrays) with status,
        arrival_s, last_token_s, prompt_len, output_tokens and `latencies`' columns;
        `warm` the chunk's warm-up mask."""
        measured = ~np.asarray(warm, dtype=bool)
        status = req["status"]  # text or categorical: compared in place, never copied to str
        for s in STATUSES:
            self.counts[s] += int(np.sum(measured & np.asarray(status == s)))
        self.counts["warmup"] += int(np.sum(~measured))
        done = measured & np.isin(np.asarray(status, dtype=object), COMPLETED)
        self._done += int(done.sum())
        self._prompt_tokens += np.asarray(req["prompt_len"], np.float64)[done].sum()
        self.output_tokens += np.asarray(req["output_tokens"], np.float64)[done].sum()
        if measured.any():
            last = np.asarray(req["last_token_s"], np.float64)[measured]
            self._ends.append((np.asarray(req["arrival_s"], np.float64)[measured].min(),
                               np.nan if np.all(np.isnan(last)) else np.nanmax(last)))
        lat = {m: np.asarray(req[f"{m}_s"], np.float64) for m in self.METRICS}
        if self.slo:
            self._good += int((meets_slo(lat["ttft"], lat["tpot"], lat["e2e"], self.slo)
                               & done).sum())
        for m in self.METRICS:
            self._keep(m, lat[m][measured if m == "schedule_fidelity" else done])
        if "decode_stall_s" in req:
            stall = np.asarray(req["decode_stall_s"], np.float64)[done]
            span = (np.asarray(req["last_token_s"], np.float64)
                    - np.asarray(req["first_token_s"], np.float64))[done]
            stalled, spans = self._stall or (0.0, 0.0)
            self._stall = (stalled + float(stall.sum()), spans + float(span.sum()))
            self._keep("decode_stall", stall)

    @property
    def nbytes(self) -> int:
        """The per-request values' arrays, in bytes (sized for the capacity up front)."""
        return sum(v.nbytes for v in self._values.values())

    def _keep(self, metric: str, values: np.ndarray) -> None:
        at = self._filled[metric]
        self._values[metric][at:at + len(values)] = values  # numpy refuses past the capacity
        self._filled[metric] = at + len(values)

    def rows(self, itl_values, itl_counts=None) -> pd.DataFrame:
        """The tidy rows (metric, stat, value, unit), with the inter-token gaps of the
        measured, completed requests (values, with counts or None)."""
        rows = [("requests", s, float(self.counts[s]), "requests") for s in STATUSES]
        rows.append(("requests", "warmup", float(self.counts["warmup"]), "requests"))
        ends = np.array(self._ends, np.float64).reshape(-1, 2)
        window = measured_window(ends[:, 0], ends[:, 1], np.ones(len(ends), bool))

        def rate(count):  # per second of the measured window
            return count / window if window > 0 else float("nan")

        rows += [("tokens", "input", self._prompt_tokens, "tokens"),
                 ("tokens", "output", self.output_tokens, "tokens"),
                 ("window", "duration", window, "s"),
                 ("throughput", "requests", rate(self._done), "req/s"),
                 ("throughput", "output_tokens", rate(self.output_tokens), "tok/s"),
                 ("throughput", "total_tokens", rate(self._prompt_tokens + self.output_tokens),
                  "tok/s")]
        if self.slo:
            measured = sum(self.counts[s] for s in STATUSES)
            rows += [("goodput", "requests", rate(self._good), "req/s"),
                     ("goodput", "attainment", self._good / measured if measured else np.nan,
                      "fraction")]
            rows += [("slo", name, float(limit), "s") for name, limit in self.slo.items()]
        for metric in ("ttft", "tpot", "itl", "e2e", "queueing_delay", "schedule_fidelity"):
            values, counts = (itl_values, itl_counts) if metric == "itl" else \
                (self._values[metric][:self._filled[metric]], None)
            rows += [(metric, stat, float(x), "samples" if stat == "count" else "s")
                     for stat, x in describe(values, counts).items()]
        if self._stall is not None:
            stalled, spans = self._stall
            rows += [("decode_stall", stat, float(x), "samples" if stat == "count" else "s")
                     for stat, x in describe(self._values["decode_stall"]
                                             [:self._filled["decode_stall"]]).items()]
            rows.append(("decode_stall", "share", stalled / spans if spans > 0 else np.nan,
                         "fraction"))
        return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def _warmup_mask(warmup, n: int) -> np.ndarray:
    warm = np.zeros(n, dtype=bool) if warmup is None else np.asarray(warmup, dtype=bool)
    if warm.shape != (n,):
        raise ValueError(f"warmup must be a boolean mask of {n} requests, got {warm.shape}")
    return warm
