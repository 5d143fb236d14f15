"""A trace's reuse bound (docs/metrics.md, "Prefix cache"): the share of its prompt tokens
in leading blocks that an earlier request's prompt already held, which an infinite prefix
cache would serve. The cache is taken to commit every prefill before the next request
arrives. Like the
cache, the bound counts full blocks only and never a prompt's last block, and converts the
trace's hash blocks to the engine's block size as the scheduler does (engine/block_hashes.py)."""

from __future__ import annotations

from typing import List, Optional

import pandas as pd

from engine.block_hashes import block_hashes


def reuse_bound(df: pd.DataFrame, hash_block_size: int,
                block_size: Optional[int] = None) -> dict:
    """{reuse_bound: fraction, reuse_tokens, prompt_tokens, block_size} over df's requests in
    order; df has prompt_len and hash_ids (a list, or None, per request). block_size: the
    engine's (default: the hash block)."""
    block = block_size or hash_block_size
    hit = sum(reuse_hits(df, hash_block_size, block))
    total = int(df["prompt_len"].sum())
    return dict(reuse_bound=hit / total if total else float("nan"), reuse_tokens=hit,
                prompt_tokens=total, block_size=block)


def reuse_hits(df: pd.DataFrame, hash_block_size: int, block_size: int) -> List[int]:
    """Each request's tokens that the bound counts as served from the cache (reuse_bound)."""
    seen: set = set()
    hits = []
    for prompt_len, ids in zip(df["prompt_len"].tolist(), df["hash_ids"].tolist()):
        if ids is None:
            hits.append(0)
            continue
        hashes = block_hashes(ids, hash_block_size, block_size, prompt_len)
        shareable, n = min(len(hashes), (prompt_len - 1) // block_size), 0
        while n < shareable and hashes[n] in seen:
            n += 1
        hits.append(n * block_size)
        seen.update(hashes)
    return hits
