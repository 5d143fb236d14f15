"""The schedule output contract, declared once: the Protocols below (PlanContract,
BatchContract, PostprocessContract, SeqRecordContract) name every member a plan, its
batches and a postprocess result have, with its type and dtype. Both schedulers' objects
satisfy them: the C++ core's (csrc/bindings/plan_bindings.cpp, typed in engine/_core.pyi)
and the reference scheduler's dataclasses below. Code that reads plans is typed against the
Protocols; mypy checks both sides structurally, tests/test_plan_contract.py checks real
plans of each at run time, and tests/test_differential.py compares the two field by field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Protocol, Sequence

import numpy as np
import numpy.typing as npt

from .arguments import integers, is_sequence

# Batch.kind values: what a scheduled row computes.
KIND_CHUNK = 0  # a prefill chunk that does not finish the prefill (no sampled token)
KIND_FINAL = 1  # the chunk that finishes the prefill (samples the first token)
KIND_DECODE = 2  # a decode step of q = 1 + num_mtp positions
KIND_NAMES = ("chunk", "final", "decode")  # as the tables spell them
PHASES = ("decode", "prompt")  # a step's round, indexed by its prompt flag (the steps table's)


class BatchContract(Protocol):
    """One DP rank's rows of a plan, and the rank's state after the round."""

    @property
    def rank(self) -> int: ...
    @property
    def seq_ids(self) -> npt.NDArray[np.int64]: ...
    @property
    def seqlen_q(self) -> npt.NDArray[np.int32]: ...  # real tokens computed
    @property
    def seqlen_k(self) -> npt.NDArray[np.int32]: ...  # num_cached + num_inflight + seqlen_q
    @property
    def padded_q(self) -> npt.NDArray[np.int32]: ...  # seqlen_q padded for CP alignment
    @property
    def kind(self) -> npt.NDArray[np.int8]: ...  # KIND_*
    @property
    def block_tables(self) -> npt.NDArray[np.int32]: ...  # [rows, max blocks], -1 padded
    @property
    def empty(self) -> bool: ...  # no rows
    @property
    def kv_blocks_free(self) -> int: ...  # after this round
    @property
    def num_waiting(self) -> int: ...
    @property
    def num_running(self) -> int: ...
    @property
    def num_hit_tokens(self) -> int: ...  # prompt tokens this round's admissions found cached
    @property
    def num_reloaded_blocks(self) -> int: ...  # of their blocks, reloaded from the host tier
    @property
    def num_evicted_blocks(self) -> int: ...  # retained blocks this round's allocations evicted
    @property
    def num_retained_blocks(self) -> int: ...  # free blocks still in the prefix index


class PlanContract(Protocol):
    """What one schedule() call returns."""

    @property
    def step(self) -> int: ...
    @property
    def phase(self) -> str: ...  # "prompt" or "decode" (PHASES)
    @property
    def batches(self) -> Sequence[BatchContract]: ...  # one per DP rank
    @property
    def preempted(self) -> npt.NDArray[np.int64]: ...  # seq ids, in preemption order
    @property
    def rejected(self) -> npt.NDArray[np.int64]: ...  # seq ids rejected since the last plan
    @property
    def sched_start_ns(self) -> int: ...  # steady clock (CLOCK_MONOTONIC) at entry
    @property
    def sched_ns(self) -> int: ...  # time spent inside schedule()


class SeqRecordContract(Protocol):
    """What the requests table needs of a sequence (add_sequence's, and each one that left)."""

    @property
    def seq_id(self) -> int: ...
    @property
    def dp_rank(self) -> int: ...
    @property
    def status(self) -> str: ...  # "waiting" | "finished" | "rejected"
    @property
    def output_len(self) -> int: ...
    @property
    def num_preemptions(self) -> int: ...
    @property
    def recomputed_tokens(self) -> int: ...
    @property
    def prefix_hit_tokens(self) -> int: ...
    @property
    def reason(self) -> str: ...


class PostprocessContract(Protocol):
    """What one postprocess(plan) call returns."""

    @property
    def step(self) -> int: ...  # the plan's
    @property
    def finished(self) -> npt.NDArray[np.int64]: ...  # seq ids finished (or handed off) here
    @property
    def discarded_tokens(self) -> int: ...
    @property
    def output_len(self) -> npt.NDArray[np.int32]: ...  # per scheduled row, rank-then-batch
    @property
    def left(self) -> Sequence[SeqRecordContract]: ...


@dataclass
class Batch:
    rank: int
    seq_ids: npt.NDArray[np.int64]
    seqlen_q: npt.NDArray[np.int32]  # real tokens computed
    seqlen_k: npt.NDArray[np.int32]  # num_cached + num_inflight + seqlen_q
    padded_q: npt.NDArray[np.int32]  # seqlen_q padded for context-parallel alignment
    kind: npt.NDArray[np.int8]  # KIND_*
    block_tables: npt.NDArray[np.int32]  # [num_seqs, max_blocks], -1 padded
    kv_blocks_free: int  # after this round
    num_waiting: int
    num_running: int
    num_hit_tokens: int  # prompt tokens this round's admissions found cached
    num_reloaded_blocks: int  # of their blocks, those reloaded from the host tier
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
    preempted: npt.NDArray[np.int64]  # seq ids, in preemption order
    rejected: npt.NDArray[np.int64]  # seq ids rejected since the previous plan
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
    finished: npt.NDArray[np.int64]  # seq ids that finished (or were handed off) in this call
    discarded_tokens: int  # in-flight work of already finished sequences
    # each scheduled row's generated tokens after the call, rank-then-batch order
    output_len: npt.NDArray[np.int32]
    left: List[SeqRecord]  # finished or handed off here (`finished` order), then those the
    #                        plan reported rejected (`rejected` order)


def parse_accepted(plan: PlanContract, accepted) -> Optional[np.ndarray]:
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


def check_accepted(plan: PlanContract, flat: Optional[np.ndarray]) -> np.ndarray:
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


if TYPE_CHECKING:  # mypy holds both schedulers' objects to the contracts; never run
    from . import _core

    def _conforms(ref: tuple[Plan, Batch, PostprocessResult, SeqRecord],
                  core: tuple[_core.Plan, _core.Batch, _core.PostprocessResult,
                              _core.SeqRecord]) -> None:
        plans: List[PlanContract] = [ref[0], core[0]]
        batches: List[BatchContract] = [ref[1], core[1]]
        posts: List[PostprocessContract] = [ref[2], core[2]]
        records: List[SeqRecordContract] = [ref[3], core[3]]
        del plans, batches, posts, records
