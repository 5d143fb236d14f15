"""The Worker of one DP rank: turns a scheduled batch into a real forward over the paged
KV cache, samples greedily, and (with MTP) verifies and proposes draft tokens.

It owns the token ids of its sequences: the prompt, then every committed token. Trace
replay forces lengths, so sampling ignores EOS; the scheduler decides when a sequence ends.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch

from .model import DeepSeekModel, ForwardBatch
from .packing import packed_layout
from .plan import KIND_CHUNK, KIND_DECODE, BatchContract


@dataclass
class WorkerOutput:
    accepted: np.ndarray  # drafts accepted per row (0 for prefill rows)
    forward_ns: int
    sample_ns: int
    # ns of each part of the forward (engine/step_parts.py); None: nothing ran
    parts: Optional[Dict[str, int]] = None


class Worker:
    def __init__(self, model: DeepSeekModel, num_kv_blocks: int, block_size: int, num_mtp: int,
                 mtp_acceptance: Optional[float], seed: int, device: torch.device,
                 keep_outputs: bool = False) -> None:
        if num_mtp > model.cfg.num_nextn_predict_layers:
            raise ValueError(f"num_mtp {num_mtp} needs {num_mtp} MTP modules; model "
                             f"{model.cfg.name} has {model.cfg.num_nextn_predict_layers}")
        self.model = model
        self.block_size = block_size
        self.num_mtp = num_mtp
        self.mtp_acceptance = mtp_acceptance  # None: verify drafts against the model
        self.device = device
        self.kv_cache = model.new_kv_cache(num_kv_blocks, block_size)
        # On CUDA the forward runs on a stream of its own, so that (with overlap) it queues
        # behind the previous step's kernels while the host schedules the next step.
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.tokens: Dict[int, List[int]] = {}
        self.drafts: Dict[int, List[int]] = {}
        # with keep_outputs, each dropped sequence's output token ids (after its prompt)
        self.outputs: Optional[Dict[int, List[int]]] = {} if keep_outputs else None
        self._prompt_len: Dict[int, int] = {}
        self._rng = np.random.default_rng(seed)

    def add(self, seq_id: int, prompt_token_ids: List[int]) -> None:
        self.tokens[seq_id] = list(prompt_token_ids)
        self.drafts[seq_id] = []
        self._prompt_len[seq_id] = len(prompt_token_ids)

    def drop(self, seq_id: int) -> None:
        tokens = self.tokens.pop(seq_id, None)
        self.drafts.pop(seq_id, None)
        prompt_len = self._prompt_len.pop(seq_id, 0)
        if self.outputs is not None and tokens is not None:
            self.outputs[seq_id] = tokens[prompt_len:]

    def output_tokens(self) -> Dict[int, List[int]]:
        """Every sequence's output token ids so far: the dropped ones' (keep_outputs) and
        the live ones'."""
        live = {s: t[self._prompt_len[s]:] for s, t in self.tokens.items()}
        return {**(self.outputs or {}), **live}

    @torch.inference_mode()
    def execute(self, batch: BatchContract) -> WorkerOutput:
        """Forward, sample and commit one rank's batch of a plan."""
        rows = len(batch.seq_ids)
        if rows == 0 and self.model.ep is None:
            return WorkerOutput(np.zeros(0, dtype=np.int64), 0, 0)
        start = time.perf_counter_ns()
        self.model.timer.start(self.device)
        with torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext():
            out = self._execute(batch, start) if rows else self._execute_empty(start)
        out.parts = self._parts()
        return out

    def _execute_empty(self, start: int) -> WorkerOutput:
        """A rank of an EP group with nothing scheduled still runs every MoE layer (the MTP
        module's too), on no tokens: the other ranks' all-to-alls need it."""
        empty = torch.zeros(0, dtype=torch.long, device=self.device)
        fb = ForwardBatch(input_ids=empty, positions=empty, slot_mapping=empty, query_start=[0],
                          seqlen_k=[], block_tables=empty.view(0, 1), decode=[])
        hidden = self.model(fb, self.kv_cache)
        if self.num_mtp:
            self.model.mtp_hidden(hidden, empty, fb, self.kv_cache)
        self._sync()
        return WorkerOutput(np.zeros(0, dtype=np.int64), time.perf_counter_ns() - start, 0)

    def _parts(self) -> Dict[str, int]:
        if self.model.ep is not None:
            self.model.ep.comm.collect()
        return self.model.timer.collect()

    def _execute(self, batch, start: int) -> WorkerOutput:
        fb, logit_rows = self._forward_batch(batch)
        hidden = self.model(fb, self.kv_cache)
        logit_index = torch.tensor([i for r in logit_rows for i in r], dtype=torch.long,
                                   device=self.device)
        greedy = self.model.logits(hidden[logit_index]).argmax(-1).tolist()
        accepted, committed = self._verify(batch, logit_rows, greedy)
        if self.num_mtp:
            next_ids = self._next_ids(batch, fb, logit_rows, greedy)
            self._propose(batch, hidden, next_ids, fb, logit_rows, accepted)
        self._sync()
        forward_done = time.perf_counter_ns()
        for seq_id, tokens in committed:
            self.tokens[seq_id] += tokens
        return WorkerOutput(accepted, forward_done - start, time.perf_counter_ns() - forward_done)

    def _forward_batch(self, batch):
        """Packed inputs of the rows; logit_rows[b] lists row b's packed logit positions."""
        layout = packed_layout(batch, self.block_size)
        ids = []
        for seq_id, q, k, kind in zip(batch.seq_ids.tolist(), batch.seqlen_q.tolist(),
                                      batch.seqlen_k.tolist(), batch.kind.tolist()):
            tokens = self.tokens[seq_id]
            if kind == KIND_DECODE:  # the last committed token, then this step's drafts
                ids += [tokens[-1]] + (self.drafts[seq_id] + [tokens[-1]] * q)[:q - 1]
            else:
                ids += tokens[k - q:k]
        to = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64), device=self.device)
        fb = ForwardBatch(input_ids=to(ids), positions=to(layout.positions),
                          slot_mapping=to(layout.slots), query_start=layout.query_start,
                          seqlen_k=batch.seqlen_k.tolist(), block_tables=to(layout.tables),
                          decode=[k == KIND_DECODE for k in batch.kind.tolist()])
        return fb, layout.logit_rows

    def _next_ids(self, batch, fb, logit_rows, greedy):
        """For MTP: the token that follows each packed token (the model's own output where
        it computed logits, the next prompt token elsewhere)."""
        nxt = torch.roll(fb.input_ids, -1)
        g = 0
        for b, (seq_id, k) in enumerate(zip(batch.seq_ids.tolist(), batch.seqlen_k.tolist())):
            end = fb.query_start[b + 1] - 1
            if batch.kind[b] == KIND_CHUNK:
                nxt[end] = self.tokens[seq_id][k]
            for i in logit_rows[b]:
                nxt[i] = greedy[g]
                g += 1
        return nxt

    def _verify(self, batch, logit_rows, greedy):
        """Drafts accepted per row, and the tokens each sampling row commits."""
        accepted = np.zeros(len(batch.seq_ids), dtype=np.int64)
        committed, g = [], 0
        for b, (seq_id, kind) in enumerate(zip(batch.seq_ids.tolist(), batch.kind.tolist())):
            outs = greedy[g:g + len(logit_rows[b])]
            g += len(logit_rows[b])
            if kind == KIND_CHUNK:
                continue
            if kind == KIND_DECODE:
                accepted[b] = self._accept(self.drafts[seq_id][:len(outs) - 1], outs)
            committed.append((seq_id, outs[:accepted[b] + 1]))
        return accepted, committed

    def _propose(self, batch, hidden, next_ids, fb, logit_rows, accepted) -> None:
        """Run the MTP module on every packed token (its KV layer needs them all) and draft
        from the last committed position of each sampling row."""
        h = self.model.mtp_hidden(hidden, next_ids, fb, self.kv_cache)
        rows = [b for b in range(len(logit_rows)) if logit_rows[b]]
        last = torch.tensor([logit_rows[b][accepted[b]] for b in rows], dtype=torch.long,
                            device=self.device)
        drafts = self.model.lm_head(h[last]).argmax(-1).tolist()
        for b, draft in zip(rows, drafts):
            self.drafts[int(batch.seq_ids[b])] = [draft]

    def _accept(self, drafts, outs) -> int:
        """Leading drafts accepted: by the seeded acceptance model, or by verification."""
        if self.mtp_acceptance is not None:
            hits = self._rng.random(len(drafts)) < self.mtp_acceptance
            return int(np.argmin(hits)) if not hits.all() else len(drafts)
        a = 0
        while a < len(drafts) and drafts[a] == outs[a]:
            a += 1
        return a

    def _sync(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()
