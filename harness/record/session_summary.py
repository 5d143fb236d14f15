"""The summary rows of a session trace's run (docs/metrics.md, "Sessions"): its sessions'
makespans and turns, the share of their makespans some turn of theirs spent in the engine
(and the rest, waiting on gaps), the prefix-hit share of their first and later turns, and
TTFT split by whether the turn's prompt hit the prefix cache (against an endpoint, whose
hits are unknown: NaN and no samples)."""

from __future__ import annotations

from typing import List

import numpy as np
import pandas as pd

from .metrics import SUMMARY_COLUMNS, describe

REQUEST_COLUMNS = ("session_id", "arrival_s", "last_token_s", "prompt_len",
                   "prefix_hit_tokens", "status", "ttft_s")
COMPLETED = ("finished", "handed_off")


def engine_time(session_id: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.Series:
    """By session: the time at least one of its turns was in the engine, the union of its
    turns' [arrival, last token] (a turn without a last token adds nothing): its turns in
    arrival order merged into spans, the spans' lengths added in order."""
    keep = ~np.isnan(end)
    frame = pd.DataFrame({"s": session_id[keep], "a": start[keep], "b": end[keep]})
    frame = frame.sort_values(["s", "a"], kind="stable")
    out = pd.Series(0.0, index=np.unique(session_id), dtype=np.float64)
    if frame.empty:
        return out
    s, a = frame["s"].to_numpy(), frame["a"].to_numpy()
    reach = frame.groupby("s", sort=False)["b"].cummax().to_numpy()  # the latest end so far
    first = np.r_[True, s[1:] != s[:-1]]
    begin = np.flatnonzero(first | (a > np.r_[-np.inf, reach[:-1]]))  # a span's first turn
    lo, hi = a[begin], reach[np.r_[begin[1:] - 1, len(a) - 1]]
    sessions = np.flatnonzero(first[begin])  # each session's first span
    spans = np.diff(np.r_[sessions, len(begin)])
    whose = np.repeat(np.arange(len(sessions)), spans)
    last = sessions + spans - 1
    inner = np.ones(len(begin), bool)
    inner[last] = False
    # bincount adds each session's spans in their order, from 0: the loop's sums exactly
    total = np.bincount(whose[inner], (hi - lo)[inner], len(sessions))
    out.loc[s[begin[last]]] = total + hi[last] - lo[last]
    return out


def session_summary(requests: pd.DataFrame, sessions: pd.DataFrame, first: np.ndarray,
                    measured: np.ndarray) -> pd.DataFrame:
    """`requests`: the requests table (REQUEST_COLUMNS, request_id order, a row per trace
    row); `sessions`: the sessions table; `first`: by request, a session's root turn;
    `measured`: by request, not first scheduled in warm-up."""
    rows: List[tuple] = []

    def dist(metric: str, values, unit: str) -> None:
        rows.extend((metric, stat, value, "samples" if stat == "count" else unit)
                    for stat, value in describe(values).items())

    dist("session_makespan", sessions["makespan_s"], "s")
    dist("session_turns", sessions["turns"], "turns")
    ended = sessions[sessions["makespan_s"].notna()]
    busy = engine_time(requests["session_id"].to_numpy(np.int64),
                       requests["arrival_s"].to_numpy(np.float64),
                       requests["last_token_s"].to_numpy(np.float64))
    span = ended["makespan_s"].sum()
    engine = busy.reindex(ended["session_id"].to_numpy()).sum() / span if span > 0 else np.nan
    rows += [("session_time", "engine_share", engine, "fraction"),
             ("session_time", "gap_share", 1.0 - engine, "fraction")]
    hits = requests["prefix_hit_tokens"].to_numpy(np.int64)
    known = bool((hits >= 0).any())  # none is against an endpoint
    hits = np.maximum(hits, 0)
    prompt = requests["prompt_len"].to_numpy(np.int64)
    for stat, turns in (("first_turns", first), ("later_turns", ~first)):
        total = prompt[turns].sum()
        rows.append(("session_prefix_hit", stat,
                     hits[turns].sum() / total if total and known else np.nan, "fraction"))
    completed = requests["status"].astype(str).isin(COMPLETED).to_numpy() & measured & known
    ttft = requests["ttft_s"].to_numpy(np.float64)
    dist("ttft_prefix_hit", ttft[completed & (hits > 0)], "s")
    dist("ttft_prefix_miss", ttft[completed & (hits == 0)], "s")
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
