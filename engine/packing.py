"""A batch's packed layout, as a Worker hands it to the forward: each row's positions, the
KV slot of each position, the padded block tables, where each row's queries start, and
which packed positions get logits. Only lengths and blocks: no token ids. The Worker's,
and the emulated executor's (engine/executors/emulated.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np

from .plan import KIND_DECODE, KIND_FINAL, BatchContract


@dataclass(slots=True)
class PackedLayout:
    positions: np.ndarray  # int64, one per packed token
    slots: np.ndarray  # int64 KV slot of each packed token; -1: no block (MTP draft overhang)
    tables: np.ndarray  # int64 [rows, width] block tables padded with -1
    query_start: List[int]  # row b's tokens are packed at query_start[b]:query_start[b + 1]
    logit_rows: List[List[int]]  # row b's packed positions that get logits


def packed_layout(batch: BatchContract, block_size: int) -> PackedLayout:
    bs = block_size
    # MTP draft positions past a sequence's footprint have no block: pad the tables with
    # -1 so every visible position has an entry (slot -1: no KV written or trusted).
    width = max(-(-max(batch.seqlen_k.tolist()) // bs), batch.block_tables.shape[1])
    tables = np.full((len(batch.seq_ids), width), -1, dtype=np.int64)
    tables[:, :batch.block_tables.shape[1]] = batch.block_tables
    positions, slots, query_start, logit_rows = [], [], [0], []
    for b, (q, k, kind) in enumerate(zip(batch.seqlen_q.tolist(), batch.seqlen_k.tolist(),
                                         batch.kind.tolist())):
        pos = np.arange(k - q, k)
        block = tables[b, pos // bs]
        slots.append(np.where(block >= 0, block * bs + pos % bs, -1))
        positions.append(pos)
        start = query_start[-1]
        logit_rows.append(list(range(start, start + q)) if kind == KIND_DECODE
                          else [start + q - 1] if kind == KIND_FINAL else [])
        query_start.append(start + q)
    return PackedLayout(np.concatenate(positions), np.concatenate(slots), tables, query_start,
                        logit_rows)
