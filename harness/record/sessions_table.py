"""The sessions table of a session trace's run (harness/schema/tables.py, SESSIONS_TABLE):
one row per session, from the requests table as written and the trace's session columns
(harness/traces/sessions.py). Hits by turn index are the requests table's own
(`prefix_hit_tokens` by `turn`); against an endpoint, which reports none, a session's hits
are -1, unknown."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..schema.tables import SESSIONS_TABLE

REQUEST_COLUMNS = ("arrival_s", "last_token_s", "prompt_len", "prefix_hit_tokens",
                   "output_tokens", "status")


def session_rows(requests: pd.DataFrame, trace: pd.DataFrame) -> pd.DataFrame:
    """`requests`: the requests table (REQUEST_COLUMNS, request_id order, a row per trace
    row); `trace`: the session frame it replayed."""
    parent = trace["parent_row"].to_numpy(np.int64)
    sub = (trace["gap_kind"] == "subagent").to_numpy(bool, copy=True)
    for i, p in enumerate(parent):  # a parent's row comes before its children's
        sub[i] |= p >= 0 and sub[p]
    root = parent < 0
    hits = requests["prefix_hit_tokens"].to_numpy(np.int64)
    turns = pd.DataFrame({
        "session_id": trace["session_id"].to_numpy(np.int64),
        "start_s": np.where(root, requests["arrival_s"].to_numpy(np.float64), np.nan),
        "end_s": requests["last_token_s"].to_numpy(np.float64),
        "gap_s": np.where(root, 0.0, trace["gap_s"].to_numpy(np.float64)),
        "subagent_turns": sub.astype(np.int64),
        "finished_turns": (requests["status"].astype(str) == "finished").to_numpy(np.int64),
        "prompt_tokens": requests["prompt_len"].to_numpy(np.int64),
        "prefix_hit_tokens": np.maximum(hits, 0),
        "output_tokens": requests["output_tokens"].to_numpy(np.int64)})
    by = turns.groupby("session_id", sort=False)
    out = by.agg(turns=("start_s", "size"), subagent_turns=("subagent_turns", "sum"),
                 finished_turns=("finished_turns", "sum"), start_s=("start_s", "max"),
                 end_s=("end_s", "max"), gap_s=("gap_s", "sum"),
                 prompt_tokens=("prompt_tokens", "sum"),
                 prefix_hit_tokens=("prefix_hit_tokens", "sum"),
                 output_tokens=("output_tokens", "sum")).reset_index()
    out["makespan_s"] = out["end_s"] - out["start_s"]
    if not (hits >= 0).any():  # against an endpoint: unknown
        out["prefix_hit_tokens"] = -1
    out = out.sort_values(["start_s", "session_id"], kind="stable", ignore_index=True)
    return out[list(SESSIONS_TABLE.names)]
