"""The recorder: what each step and request did, in columnar numpy buffers.

Per step it appends a few numbers per DP rank into preallocated columns and the plan's
arrays (views, no copies of Python objects) into chunk lists; the tables are assembled
once, at the end (harness/tables.py).
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from engine.plan import KIND_CHUNK

STEP_COLUMNS = {
    "step": np.int64, "dp_rank": np.int32, "prompt_phase": np.bool_, "empty": np.bool_,
    "warmup": np.bool_, "num_seqs": np.int32, "tokens_q": np.int64, "padded_tokens_q": np.int64,
    "sum_seqlen_k": np.int64, "max_seqlen_k": np.int32, "preempted": np.int32,
    "rejected": np.int32, "finished": np.int32, "discarded_tokens": np.int64,
    "kv_blocks_free": np.int32, "waiting": np.int32, "running": np.int32,
    "t_start_s": np.float64, "t_end_s": np.float64, "sched_cpp_ns": np.int64,
    "sched_call_ns": np.int64, "forward_ns": np.int64, "sample_ns": np.int64,
    "postprocess_ns": np.int64, "step_ns": np.int64, "model_flops": np.float64,
    "executed_flops": np.float64, "bytes": np.float64,
}


class Columns:
    """Fixed-dtype columns that grow by doubling; rows are appended one at a time."""

    def __init__(self, dtypes: Dict[str, type], capacity: int = 1024) -> None:
        self.data = {name: np.zeros(capacity, dtype) for name, dtype in dtypes.items()}
        self.n = 0

    def append(self, **row) -> None:
        if self.n == len(next(iter(self.data.values()))):
            self.data = {k: np.concatenate((v, np.zeros_like(v))) for k, v in self.data.items()}
        for name, value in row.items():
            self.data[name][self.n] = value
        self.n += 1

    def view(self) -> Dict[str, np.ndarray]:
        return {k: v[:self.n] for k, v in self.data.items()}


class Recorder:
    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.steps = Columns(STEP_COLUMNS)
        self._batches: List[tuple] = []  # (step, rank, seq_ids, kind, seqlen_q, seqlen_k)
        self._tokens: List[tuple] = []  # (seq_ids, time): one entry per committed token
        self.enqueued: Dict[int, float] = {}  # request id -> actual enqueue time (s)

    def enqueue(self, request_id: int, actual_s: float) -> None:
        self.enqueued[request_id] = actual_s

    def step(self, record, t_start_s: float, t_end_s: float) -> None:
        warmup = record.step < self.warmup_steps
        for rank, batch in enumerate(record.batches):
            q, k = batch.seqlen_q, batch.seqlen_k
            self.steps.append(
                step=record.step, dp_rank=rank, prompt_phase=record.phase == "prompt",
                empty=batch.empty, warmup=warmup, num_seqs=len(q), tokens_q=q.sum(),
                padded_tokens_q=batch.padded_q.sum(), sum_seqlen_k=k.sum(),
                max_seqlen_k=k.max() if len(k) else 0,
                preempted=len(record.preempted), rejected=len(record.rejected),
                finished=len(record.finished), discarded_tokens=record.discarded_tokens,
                kv_blocks_free=batch.num_free_blocks, waiting=batch.num_waiting,
                running=batch.num_running, t_start_s=t_start_s, t_end_s=t_end_s,
                sched_cpp_ns=record.sched_cpp_ns, sched_call_ns=record.sched_call_ns,
                forward_ns=record.forward_ns, sample_ns=record.sample_ns,
                postprocess_ns=record.postprocess_ns, step_ns=record.step_ns,
                model_flops=record.model_flops[rank],
                executed_flops=record.executed_flops[rank], bytes=record.bytes[rank])
            if len(q):
                self._batches.append((record.step, rank, batch.seq_ids, batch.kind, q, k))
                sampled = batch.kind != KIND_CHUNK
                counts = 1 + record.accepted[rank][sampled]
                self._tokens.append((np.repeat(batch.seq_ids[sampled], counts), t_end_s))

    def batches(self) -> Dict[str, np.ndarray]:
        if not self._batches:
            empty = np.zeros(0, dtype=np.int64)
            return dict(step=empty, dp_rank=empty, seq_id=empty, kind=empty, seqlen_q=empty,
                        seqlen_k=empty)
        sizes = [len(b[2]) for b in self._batches]
        return dict(step=np.repeat([b[0] for b in self._batches], sizes),
                    dp_rank=np.repeat([b[1] for b in self._batches], sizes),
                    seq_id=np.concatenate([b[2] for b in self._batches]),
                    kind=np.concatenate([b[3] for b in self._batches]),
                    seqlen_q=np.concatenate([b[4] for b in self._batches]),
                    seqlen_k=np.concatenate([b[5] for b in self._batches]))

    def token_times(self):
        """Committed-token times grouped by request: (seq ids sorted, times), CSR-ready."""
        if not self._tokens:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        ids = np.concatenate([t[0] for t in self._tokens])
        times = np.concatenate([np.full(len(t[0]), t[1]) for t in self._tokens])
        order = np.argsort(ids, kind="stable")  # stable: each request's tokens stay in order
        return ids[order], times[order]
