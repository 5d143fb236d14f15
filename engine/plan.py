"""The schedule output contract, as the reference scheduler returns it.

The C++ core returns objects with exactly these attribute names and dtypes (bound in
csrc/bindings.cpp); tests compare the two field by field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from .arguments import integers, is_sequence

# Batch.kind values: what a scheduled row computes.
KIND_CHUNK = 0  # a prefill chunk that does not finish the prefill (no sampled token)
KIND_FINAL = 1  # the chunk that finishes the prefill (samples the first token)
KIND_DECODE = 2  # a decode step of q = 1 + num_mtp positions
KIND_NAMES = ("chunk", "final", "decode")  # as the tables spell them
PHASES = ("decode", "prompt")  # a step's round, indexed by its prompt flag (the steps table's)


@dataclass
class Batch:
    rank: int
    seq_ids: np.ndarray  # int64
    seqlen_q: np.ndarray  # int32, real tokens computed
    seqlen_k: np.ndarray  # int32, num_cached + num_inflight + seqlen_q
    padded_q: np.ndarray  # int32, seqlen_q padded for context-parallel alignment
    kind: np.ndarray  # int8, KIND_*
    block_tables: np.ndarray  # int32 [num_seqs, max_blocks], -1 padded
    num_free_blocks: int  # after this round
    num_waiting: int
    num_running: int
    num_hit_tokens: int  # prompt tokens this round's admissions found cached
    num_evicted_blocks: int  # retained blocks this round's allocations evicted
    num_retained_blocks: int  # free blocks still in the prefix index, after this round

    @property
    def empty(self) -> bool:
        return len(self.seq_ids) == 0


@dataclass
class Plan:
    step: int
    phase: str  # "prompt" or "decode"
    batches: List[Batch]  # one per DP rank
    preempted: np.ndarray  # int64 seq ids, in preemption order
    rejected: np.ndarray  # int64 seq ids rejected since the previous plan
    sched_start_ns: int  # steady clock (CLOCK_MONOTONIC) at entry
    owner: int
    sched_ns: int = 0  # time spent inside schedule()


@dataclass
class SeqRecord:
    """What the requests table needs of a sequence: add_sequence returns one, and
    postprocess one for every sequence that left with it."""

    seq_id: int
    dp_rank: int
    status: str  # "waiting" | "finished" | "rejected" (at add); "finished" | "rejected"
    output_len: int  # generated tokens (a completion engine's arrive with one)
    num_preemptions: int
    recomputed_tokens: int
    prefix_hit_tokens: int
    reason: str  # why it was rejected


@dataclass
class PostprocessResult:
    step: int  # the plan's
    finished: np.ndarray  # int64 seq ids that finished (or were handed off) in this call
    discarded_tokens: int  # in-flight work of already finished sequences
    output_len: np.ndarray  # int32, each scheduled row's generated tokens after the call,
    #                         rank-then-batch order
    left: List[SeqRecord]  # finished or handed off here (`finished` order), then those the
    #                        plan reported rejected (`rejected` order)


def parse_accepted(plan, accepted) -> Optional[np.ndarray]:
    """Drafts accepted per scheduled row, rank-then-batch order, as int64, or None (none
    accepted). `accepted` is None, a flat sequence with one value per scheduled row, or one
    sequence per rank (whose lengths are checked here). Values are checked by
    check_accepted, once the plan is known to be the one to post-process."""
    if accepted is None:
        return None
    if isinstance(accepted, np.ndarray) or not is_sequence(accepted):
        return integers("accepted", accepted)
    items = list(accepted)
    per_rank = len(items) == len(plan.batches) and any(
        x.ndim == 1 if isinstance(x, np.ndarray) else is_sequence(x) for x in items)
    if not per_rank:
        return integers("accepted", accepted)
    parts = []
    for r, (x, batch) in enumerate(zip(items, plan.batches)):
        part = integers(f"accepted[{r}]", x)
        if len(part) != len(batch.seq_ids):
            raise ValueError(f"accepted[{r}] has {len(part)} values; rank {r} scheduled "
                             f"{len(batch.seq_ids)}")
        parts.append(part)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def check_accepted(plan, flat: Optional[np.ndarray]) -> np.ndarray:
    """parse_accepted's values checked against the plan: one per scheduled row, within
    0..seqlen_q - 1 for a decode row and 0 for a prefill row. None: zeros."""
    total = sum(len(b.seq_ids) for b in plan.batches)
    if flat is None:
        return np.zeros(total, dtype=np.int64)
    if len(flat) != total:
        raise ValueError(f"accepted has {len(flat)} values; the plan scheduled {total} sequences")
    limits = np.concatenate([np.where(b.kind == KIND_DECODE, b.seqlen_q.astype(np.int64) - 1, 0)
                             for b in plan.batches]) if total else np.zeros(0, dtype=np.int64)
    bad = np.flatnonzero((flat < 0) | (flat > limits))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"accepted[{i}] = {int(flat[i])} is outside 0..{int(limits[i])} "
                         f"(drafts of that scheduled sequence)")
    return flat
