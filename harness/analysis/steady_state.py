"""A run's steady-state window and its figures (docs/frontier.md, "The steady-state
window"): from when the deciding pool's running sequences first reach their plateau to the
last arrival, fill and drain left out. The core reads DataFrames; `of_run` reads them from
a run folder.

The deciding pool is a P/D run's decode pool (its running sequences are the system's
fill), else every instance. A step's running sequences are the sum over the rows it has: a
rank without a row ran nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import numpy as np
import pandas as pd

from ..record.metrics import describe
from ..record.run import Run
from ..schema.values import COMPLETED

# Thresholds of the plateau rule, each with its reason.
LEVEL_FROM = 0.5       # the level is read over the arrival span's later half: a fill is over by then
LEVEL_QUANTILE = 0.75  # of the running sequences there: a plateau held over its last quarter sets it
FILL_FRACTION = 0.9    # the plateau starts where running sequences first reach 90 % of the level
MIN_STEPS = 20         # fewer steps in the window are too few for a rate or a median
MIN_SPAN_SHARE = 0.25  # a window under a quarter of the arrival span is the run's tail, not its body
RISE_TOLERANCE = 0.1   # the window's later half above its earlier half by more: still filling,
RISE_SLACK = 1.0       # and by more than one sequence (at a level of a few, one is noise)

STEP_COLUMNS = ("role", "instance", "step", "warmup", "running", "tokens_q", "prefill_tokens_q",
                "prefix_hit_tokens", "t_end_s")
BATCH_COLUMNS = ("role", "instance", "step", "kind")
REQUEST_COLUMNS = ("arrival_s", "first_token_s", "last_token_s", "output_tokens", "status",
                   "ttft_s", "tpot_s")
_STEP = ["role", "instance", "step"]


@dataclass(frozen=True)
class SteadyState:
    """The window and the figures over it; without a window (`found` false, `reason` why)
    every time and figure is NaN and `steps` 0. Rates are per second of the window; per
    device: over the run's devices (a P/D run's: both pools')."""

    found: bool
    reason: str
    start_s: float = math.nan
    end_s: float = math.nan
    length_s: float = math.nan
    steps: int = 0                               # the deciding pool's steps ending in it
    output_tokens_per_s_per_device: float = math.nan
    total_tokens_per_s_per_device: float = math.nan  # input (prompt) and output tokens
    requests_per_s: float = math.nan             # requests completing in the window
    tokens_per_s_per_user: float = math.nan      # median 1 / TPOT of requests decoding in it
    tpot_p50_s: float = math.nan                 # TPOT and TTFT of the requests arriving in it
    tpot_p90_s: float = math.nan
    ttft_p50_s: float = math.nan
    ttft_p90_s: float = math.nan


def of_run(run: Run) -> SteadyState:
    """The steady state of a run folder read back (harness/record/run.py): its steps,
    batches (the final prefill chunks) and requests tables, its devices. BadInput naming
    the file where a table or a column is missing or holds another kind."""
    return steady_state(run.table("steps", STEP_COLUMNS), _finals(run),
                        run.table("requests", REQUEST_COLUMNS), run.devices)


def _finals(run: Run) -> pd.DataFrame:
    """The batches table's `final` rows, filtered as a Parquet file is read: the table holds
    a row per sequence a step, a hundred times the finals."""
    return run.table("batches", BATCH_COLUMNS, where=("kind", "final"))


def steady_state(steps: pd.DataFrame, batches: pd.DataFrame, requests: pd.DataFrame,
                 devices: int) -> SteadyState:
    """The steady state from a run's tables: `steps` with STEP_COLUMNS, `batches` with
    BATCH_COLUMNS (only its `final` rows are read: each samples a request's first token, or
    a preempted one's next), `requests` with REQUEST_COLUMNS; `devices` the run's chips."""
    for name, frame, columns in (("steps", steps, STEP_COLUMNS),
                                 ("batches", batches, BATCH_COLUMNS),
                                 ("requests", requests, REQUEST_COLUMNS)):
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"the {name} table lacks the column(s) {', '.join(missing)}")
    if devices < 1:
        raise ValueError(f"devices must be at least 1, got {devices}")
    arrivals = requests["arrival_s"].to_numpy(np.float64)
    if len(arrivals) < 2 or not arrivals.max() > arrivals.min():
        return SteadyState(False, "every request arrived at once (or one request): no arrival "
                                  "span to be steady in")
    first, last = float(arrivals.min()), float(arrivals.max())
    per_step = _per_step(steps)
    disaggregated = bool((per_step["role"] == "decode").any())
    deciding = per_step[per_step["role"] == "decode"] if disaggregated else per_step
    warm = per_step["t_end"][per_step["warmup"]]
    window = _window(deciding, float(warm.max()) if len(warm) else -math.inf, first, last,
                     "the decode pool" if disaggregated else "the deployment")
    if isinstance(window, str):
        return SteadyState(False, window)
    return _figures(per_step, batches, requests, devices, *window)


def _window(deciding: pd.DataFrame, warm_end: float, first: float, last: float,
            pool: str) -> Union[str, Tuple[float, float, int]]:
    """The window (start, end, the deciding pool's steps in it) by the plateau rule, over
    the deciding pool's steps after the warm-up's; or why there is none."""
    t, running = _pool_series(deciding)
    span = (t >= first) & (t <= last) & (t > warm_end)
    if not span.any() or not running[span].max() > 0:
        return (f"no sequence ran between the first arrival ({first:.4g} s) and the last "
                f"({last:.4g} s), warm-up steps left out")
    level_from = first + LEVEL_FROM * (last - first)
    later = span & (t >= level_from)
    level = float(np.quantile(running[later if later.any() else span], LEVEL_QUANTILE))
    start = float(t[span][np.argmax(running[span] >= FILL_FRACTION * level)])
    end = float(t[span].max())  # the last step that ends by the last arrival
    count = int(_within(deciding["t_end"].to_numpy(np.float64), start, end).sum())
    where = f"from {start:.4g} s (at {FILL_FRACTION:.0%} of the level, {level:g}) to the last " \
        f"arrival ({last:.4g} s)"
    filling = f"still filling at the last arrival: the running sequences of {pool} rose from"
    window = _halves(t, running, start, end)
    if window is not None and _rises(window):
        return (f"{filling} {window[0]:g} to {window[2]:g} (the medians of the halves of the "
                f"stretch {where})")
    if count >= MIN_STEPS and end - start >= MIN_SPAN_SHARE * (last - first):
        return start, end, count
    short = f"too short: {count} steps of {pool} {where}, fewer than MIN_STEPS ({MIN_STEPS})" \
        if count < MIN_STEPS else \
        f"the plateau is reached late: {where} is {(end - start) / (last - first):.0%} of " \
        f"the arrival span, less than MIN_SPAN_SHARE ({MIN_SPAN_SHARE:.0%})"
    # a window too short to show a rise in, still going up: the arrival span's later half
    # may show it
    later_halves = _halves(t, running, level_from, end)
    if window is not None and window[2] > window[0] and later_halves is not None \
            and _rises(later_halves):
        return (f"{filling} {later_halves[0]:g} to {later_halves[2]:g} (the medians of the "
                f"halves of the arrival span's later half, from {level_from:.4g} s); {short}")
    return short


def _per_step(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step of an instance: its end, warm-up flag, running sequences (its rows'
    sum), decode positions, prompt tokens covered (computed and found cached)."""
    frame = steps.assign(
        decode=steps["tokens_q"] - steps["prefill_tokens_q"],
        prompt=steps["prefill_tokens_q"] + steps["prefix_hit_tokens"])
    out = frame.groupby(_STEP, observed=True, sort=False).agg(
        t_end=("t_end_s", "max"), warmup=("warmup", "any"), running=("running", "sum"),
        decode=("decode", "sum"), prompt=("prompt", "sum")).reset_index()
    out["role"] = out["role"].astype(str)
    return out


def _pool_series(per_step: pd.DataFrame) -> Tuple[np.ndarray, np.ndarray]:
    """The pool's running sequences after each of its step ends (the sum over its
    instances, each as of its latest step), at each distinct time."""
    frame = per_step.sort_values(["role", "instance", "step"])
    change = frame.groupby(["role", "instance"], observed=True)["running"].diff()
    change = change.fillna(frame["running"]).to_numpy(np.float64)  # an instance's first step
    times = frame["t_end"].to_numpy(np.float64)
    order = np.argsort(times, kind="stable")
    times, total = times[order], np.cumsum(change[order])
    keep = np.r_[times[1:] != times[:-1], True]  # the value after the last step at a time
    return times[keep], total[keep]


def _halves(t: np.ndarray, running: np.ndarray, start: float,
            end: float) -> Optional[Tuple[float, float, float]]:
    """Over (start, end] split in time: the earlier half's median and upper quartile of the
    running sequences, the later half's median; None where a half has no step."""
    inside = _within(t, start, end)
    middle = (start + end) / 2
    early, late = running[inside & (t <= middle)], running[inside & (t > middle)]
    if not (len(early) and len(late)):
        return None
    return float(np.median(early)), float(np.quantile(early, 0.75)), float(np.median(late))


def _rises(halves: Tuple[float, float, float]) -> bool:
    """The later half higher by more than RISE_TOLERANCE of the earlier and RISE_SLACK, and
    above the earlier half's upper quartile (a shift beyond its spread, not a burst)."""
    low, upper, high = halves
    return high - low > max(RISE_TOLERANCE * low, RISE_SLACK) and high > upper


def _figures(per_step: pd.DataFrame, batches: pd.DataFrame, requests: pd.DataFrame,
             devices: int, start: float, end: float, count: int) -> SteadyState:
    """The figures over the window (start, end]: tokens from the steps ending in it (every
    pool's), requests by when they completed, decoded or arrived."""
    length = end - start
    inside = _within(per_step["t_end"].to_numpy(np.float64), start, end)
    finals = batches.loc[batches["kind"].astype(str) == "final", _STEP]
    finals = finals.assign(role=finals["role"].astype(str)).merge(
        per_step[_STEP + ["t_end"]], on=_STEP, how="left")
    sampled = int(_within(finals["t_end"].to_numpy(np.float64), start, end).sum())
    output = float(per_step["decode"][inside].sum()) * _decode_yield(per_step, len(finals),
                                                              requests) + sampled
    prompt = float(per_step["prompt"][inside].sum())
    done = requests["status"].astype(str).isin(COMPLETED).to_numpy()
    first, last = (requests[c].to_numpy(np.float64) for c in ("first_token_s", "last_token_s"))
    tpot = requests["tpot_s"].to_numpy(np.float64)
    arrived = done & _within(requests["arrival_s"].to_numpy(np.float64), start, end)
    decoding = done & (tpot > 0) & _within((first + last) / 2, start, end)
    ttft = describe(requests["ttft_s"].to_numpy(np.float64)[arrived])
    tpot_stats = describe(tpot[arrived])
    return SteadyState(
        True, "", start, end, length, count,
        output_tokens_per_s_per_device=output / length / devices,
        total_tokens_per_s_per_device=(output + prompt) / length / devices,
        requests_per_s=float((done & _within(last, start, end)).sum()) / length,
        tokens_per_s_per_user=float(np.median(1 / tpot[decoding])) if decoding.any()
        else math.nan,
        tpot_p50_s=float(tpot_stats["p50"]), tpot_p90_s=float(tpot_stats["p90"]),
        ttft_p50_s=float(ttft["p50"]), ttft_p90_s=float(ttft["p90"]))


def _decode_yield(per_step: pd.DataFrame, finals: int, requests: pd.DataFrame) -> float:
    """Output tokens committed per decode position computed, over the run: 1 without MTP
    (each decode row commits its one token); with MTP the accepted drafts' share (the steps
    table counts positions computed, not tokens committed, so a window's committed tokens
    are its positions at the run's yield). The final chunks' tokens are counted apart."""
    positions = float(per_step["decode"].sum())
    committed = float(requests["output_tokens"].sum()) - finals
    return committed / positions if positions > 0 else 0.0


def _within(values: np.ndarray, start: float, end: float) -> np.ndarray:
    return (values > start) & (values <= end)  # NaN: outside
