"""A session trace as a request trace (docs/workloads.md, "Sessions"): each turn a plain
request at the arrival a run of the trace recorded for it, its session structure dropped;
what replaying an agentic trace by its logged timestamps does."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .read import TraceError


def recorded_arrivals(df: pd.DataFrame, arrival_s: np.ndarray,
                      prompt_len: np.ndarray) -> pd.DataFrame:
    """`df`: a session trace's frame; `arrival_s`, `prompt_len`: a run's requests table of
    it in request_id order (a row per turn). The turns in arrival order, as a request
    trace's frame (hash ids kept)."""
    if len(arrival_s) != len(df) or not np.array_equal(prompt_len, df["prompt_len"]):
        raise TraceError(f"the run replayed another trace: {len(arrival_s)} requests, "
                         f"the session trace's {len(df)} turns, or other prompts")
    missing = np.flatnonzero(np.isnan(arrival_s))
    if len(missing):
        raise TraceError(f"the run did not reach {len(missing)} turns (request "
                         f"{missing[0]} first): they have no arrival")
    order = np.argsort(arrival_s, kind="stable")
    cols = ["prompt_len", "max_new_tokens"] + (["hash_ids"] if "hash_ids" in df else [])
    out = df[cols].iloc[order].reset_index(drop=True)
    out.insert(0, "arrival_s", np.asarray(arrival_s, np.float64)[order])
    out.attrs = dict(df.attrs)
    return out
