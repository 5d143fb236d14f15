"""A session trace's shape by turn index and by gap kind (`steptrace trace stats`;
docs/workloads.md, "Sessions"). A turn's index is its depth in its session's tree: 0 the
root, its parent's plus one (a sub-agent's first turn counts on from the turn it follows).
Indices are grouped in powers of two (0, 1, 2-3, 4-7, ...), so a session of a thousand
turns makes eleven rows."""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import pandas as pd

from .reuse import reuse_hits


def turn_index(df: pd.DataFrame) -> np.ndarray:
    """Each turn's depth (a parent's row comes before its children's in a session frame)."""
    depth = np.zeros(len(df), np.int64)
    for i, p in enumerate(df["parent_row"].tolist()):
        if p >= 0:
            depth[i] = depth[p] + 1
    return depth


def by_turn(df: pd.DataFrame, hash_block_size: Optional[int],
            block_size: Optional[int] = None) -> List[dict]:
    """Per group of turn indices: its turns, their prompt_len (the context's growth) and
    input_tokens, and, with hash ids, the reuse bound of its turns' prompt tokens (the
    bound of the whole trace in trace order, reuse.py, split by index)."""
    group = np.array([int(d).bit_length() for d in turn_index(df)], np.int64)
    prompt = df["prompt_len"].to_numpy()
    hits = np.array(reuse_hits(df, hash_block_size, block_size or hash_block_size)) \
        if hash_block_size else None
    rows = []
    for g in np.unique(group):
        at = group == g
        lo, hi = (1 << int(g)) >> 1, (1 << int(g)) - 1
        row: Dict[str, object] = dict(
            turns=str(lo) if lo == hi else f"{lo}-{hi}", count=int(at.sum()),
            prompt_len_mean=float(prompt[at].mean()),
            prompt_len_p50=float(np.percentile(prompt[at], 50)),
            input_tokens_mean=float(df["input_tokens"].to_numpy()[at].mean()))
        if hits is not None:
            row["reuse_bound"] = float(hits[at].sum() / prompt[at].sum())
        rows.append(row)
    return rows


def gaps_by_kind(df: pd.DataFrame) -> Dict[str, dict]:
    """The gaps of the turns that follow another, by kind: how many, mean, p50, p90, max."""
    later = df[df["parent_row"] >= 0]
    out = {}
    for kind, gaps in later.groupby("gap_kind", observed=True)["gap_s"]:
        v = gaps.to_numpy(dtype=float)
        out[str(kind)] = dict(count=len(v), mean=float(v.mean()),
                              p50=float(np.percentile(v, 50)),
                              p90=float(np.percentile(v, 90)), max=float(v.max()))
    return out
