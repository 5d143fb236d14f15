"""The pure-Python reference scheduler: the same contract and the same decisions as the
C++ core (csrc/scheduler.cpp), written for clarity. It is the oracle of the differential
tests and the side-by-side speed baseline. docs/scheduling.md is the contract both follow.

Invariants (checked by the property tests after every call):
  * free blocks + distinct blocks owned == num_kv_blocks on every rank; a block with k owners
    has reference count k, and only prompt blocks with a common hash prefix are shared.
  * seqlen_k == num_cached + num_inflight + seqlen_q for every scheduled sequence.
  * a sequence never owns more than blocks_for(footprint) blocks, and footprint fits the
    pool (else it was rejected at add time), so a lone sequence always makes progress.
    Draft positions past the footprint (MTP at the very end) get no KV slot: they could
    only produce tokens beyond max_new_tokens, which are discarded.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Tuple

import numpy as np

from .arguments import boolean, finite, integer, integers, shown
from .block_hashes import block_hashes, block_size_mismatch
from .config import SchedulerConfig
from .plan import (
    KIND_CHUNK,
    KIND_DECODE,
    KIND_FINAL,
    PHASES,
    Batch,
    Plan,
    PostprocessResult,
    SeqRecord,
    check_accepted,
    parse_accepted,
)
from .reference_block_pool import ReferenceBlockPool
from .scheduler_config import MAX_SEQ_TOKENS


@dataclass
class _Postprocessed:
    """What a postprocess gathers over its plan's rows."""

    finished: List[int] = field(default_factory=list)
    left: List[SeqRecord] = field(default_factory=list)
    output_len: List[int] = field(default_factory=list)
    discarded: int = 0


@dataclass(eq=False)
class ReferenceSequence:
    seq_id: int
    prompt_len: int
    max_new_tokens: int
    arrival_time: float
    dp_rank: int
    order: int  # position in add order: the queue and tie-break order
    footprint: int  # most tokens whose KV this sequence can ever hold
    num_tokens: int
    num_cached: int
    prefill_target: int
    num_inflight: int = 0
    inflight_samples: int = 0  # in-flight steps that will sample (final chunks, decodes)
    status: str = "waiting"
    kv_pending: bool = False  # KV in transfer (completion engine): computes nothing
    blocks: List[int] = field(default_factory=list)
    num_preemptions: int = 0
    recomputed_tokens: int = 0
    reason: str = ""
    block_hashes: tuple = ()  # [i] identifies the prompt's first (i + 1) full blocks
    num_indexed: int = 0  # leading prompt blocks offered to the prefix index
    prefix_hit_tokens: int = 0  # prompt tokens whose KV came from shared blocks
    session_id: int = -1  # the session whose turn it is, -1: none

    @property
    def output_len(self) -> int:
        return self.num_tokens - self.prompt_len


class _Rank:
    def __init__(self, num_blocks: int, host_blocks: int) -> None:
        self.pool = ReferenceBlockPool(num_blocks, host_blocks)
        self.waiting: Deque[ReferenceSequence] = deque()
        self.prefilling: List[ReferenceSequence] = []  # part-way through a prefill, add order
        self.decoding: List[ReferenceSequence] = []  # prefill fully scheduled, still generating
        self.members: set = set()  # unfinished sequences, for least_loaded
        self.num_running = 0
        self.round_hit_tokens = 0  # prefix hits admitted in the present round
        self.round_reloaded_blocks = 0  # of them, blocks reloaded from the host tier


class ReferenceScheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        if not isinstance(config, SchedulerConfig):
            raise TypeError(f"config must be a SchedulerConfig, got {type(config).__name__}")
        self.config = config
        self._lookahead = config.lookahead
        self._ranks = [_Rank(config.num_kv_blocks, config.host_kv_blocks)
                       for _ in range(config.dp_size)]
        self._seqs: dict = {}
        self._session_rank: Dict[int, int] = {}  # session_affinity: its latest sequence's
        self._ended_sessions: set = set()  # session_retention: end_session()'s
        self._pending_rejected: List[int] = []
        self._num_unfinished = 0
        self._next_step = 0  # index of the next plan
        self._next_postprocess = 0  # index of the oldest plan not yet post-processed

    # -- requests ---------------------------------------------------------------------------

    def add_sequence(self, seq_id: int, prompt_len: int, max_new_tokens: int,
                     arrival_time: float = 0.0, hash_ids=None,
                     hash_block_size=None, kv_transfer=False, session_id=-1) -> SeqRecord:
        """kv_transfer (completion engine only): its KV is still in transfer; admission
        reserves its blocks, and it decodes once kv_arrived() is called. session_id: the
        session whose turn it is (-1: none; dp_assign session_affinity). Returns the
        sequence as added: waiting, finished (a completion engine's one-token request) or
        rejected."""
        seq_id, prompt_len, max_new_tokens, arrival_time, ids, hash_block, kv_transfer, \
            session_id = self._arguments(seq_id, prompt_len, max_new_tokens, arrival_time,
                                         hash_ids, hash_block_size, kv_transfer, session_id)
        cfg = self.config
        # Beyond MAX_SEQ_TOKENS a request can never run (choice 10): rejected, lengths not kept.
        needs = prompt_len + max(max_new_tokens, self._lookahead)
        too_long = needs > MAX_SEQ_TOKENS
        if too_long:
            prompt_len = max_new_tokens = 0
        order = len(self._seqs)
        completion = cfg.engine_type == "completion"
        if too_long:
            footprint = 0
        elif cfg.engine_type == "prompt":
            footprint = prompt_len
        else:
            footprint = prompt_len + max(max_new_tokens, self._lookahead)
        seq = ReferenceSequence(seq_id, prompt_len, max_new_tokens, arrival_time, -1, order,
                          footprint, num_tokens=prompt_len + completion,
                          num_cached=prompt_len if completion else 0, prefill_target=prompt_len,
                          block_hashes=tuple(block_hashes(ids, hash_block, cfg.block_size,
                                                          prompt_len))
                          if cfg.prefix_caching else ())
        seq.dp_rank = self._assign_rank(seq, session_id)
        seq.session_id = session_id
        self._seqs[seq_id] = seq
        self._place(seq, needs if too_long else None, completion)
        # a request rejected or finished reserves nothing
        seq.kv_pending = kv_transfer and seq.status == "waiting"
        return _record(seq)

    def kv_arrived(self, seq_id: int) -> None:
        """The sequence's KV transfer ended: it decodes from the next schedule()."""
        seq_id = integer("seq_id", seq_id)
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise ValueError(f"unknown seq_id {seq_id}")
        if not seq.kv_pending:
            raise ValueError(f"sequence {seq_id} awaits no KV transfer ({seq.status})")
        seq.kv_pending = False

    def end_session(self, session_id: int) -> None:
        """No turn of the session will come any more: its held blocks (session_retention)
        become plain retained ones, and its turns' blocks are no longer held when
        released."""
        session_id = integer("session_id", session_id, 0)
        if not self.config.session_retention:
            return
        self._ended_sessions.add(session_id)
        for rank in self._ranks:
            rank.pool.unhold(session_id)

    def _release(self, rank: _Rank, seq: ReferenceSequence) -> None:
        held = (self.config.session_retention and seq.session_id >= 0
                and seq.session_id not in self._ended_sessions)
        rank.pool.release(seq.blocks, seq.session_id if held else -1)

    def _arguments(self, seq_id, prompt_len, max_new_tokens, arrival_time, hash_ids,
                   hash_block_size, kv_transfer, session_id):
        """add_sequence's arguments checked, as the C++ core checks them."""
        seq_id = integer("seq_id", seq_id)
        prompt_len = integer("prompt_len", prompt_len, 1)
        max_new_tokens = integer("max_new_tokens", max_new_tokens, 1)
        arrival_time = finite("arrival_time", arrival_time)
        ids = integers("hash_ids", hash_ids).tolist() if hash_ids is not None else []
        hash_block = (self.config.block_size if hash_block_size is None
                      else integer("hash_block_size", hash_block_size, 1))
        kv_transfer = boolean("kv_transfer", kv_transfer)
        session_id = integer("session_id", session_id, -1)
        if seq_id in self._seqs:
            raise ValueError(f"duplicate seq_id {seq_id}")
        mismatch = block_size_mismatch(hash_block, self.config.block_size)
        if mismatch:
            raise ValueError(mismatch)
        most = -(-prompt_len // hash_block)
        if len(ids) > most:
            raise ValueError(f"hash_ids has {len(ids)} entries; a {prompt_len}-token prompt "
                             f"has at most {most} blocks of {hash_block}")
        if kv_transfer and self.config.engine_type != "completion":
            raise ValueError(f"kv_transfer=True needs a completion engine; this is a "
                             f"{self.config.engine_type} engine")
        return (seq_id, prompt_len, max_new_tokens, arrival_time, ids, hash_block, kv_transfer,
                session_id)

    def _place(self, seq: ReferenceSequence, too_long: Optional[int], completion: bool) -> None:
        """A new sequence rejected (`too_long`: the tokens it needs beyond what a sequence
        holds, or its footprint beyond a rank's pool), finished (a completion engine's
        one-token request) or waiting on its rank."""
        cfg = self.config
        need = self._blocks_for(seq.footprint)
        if too_long is not None or need > cfg.num_kv_blocks:
            seq.status = "rejected"
            seq.reason = (f"needs {too_long} tokens (prompt_len + max(max_new_tokens, "
                          f"lookahead)) but a sequence holds at most {MAX_SEQ_TOKENS}"
                          if too_long is not None else
                          f"needs {need} KV blocks for {seq.footprint} tokens (block_size "
                          f"{cfg.block_size}) but a rank has {cfg.num_kv_blocks}")
            self._pending_rejected.append(seq.seq_id)
        elif completion and seq.output_len >= seq.max_new_tokens:
            seq.status = "finished"  # arrived with its only token already generated
        else:
            rank = self._ranks[seq.dp_rank]
            rank.waiting.append(seq)
            rank.members.add(seq)
            self._num_unfinished += 1

    def _assign_rank(self, seq: ReferenceSequence, session_id: int) -> int:
        if self.config.dp_assign == "round_robin":
            return seq.order % self.config.dp_size
        if self.config.dp_assign == "cache_aware" or (
                self.config.dp_assign == "session_affinity" and session_id < 0):
            return self._cache_aware_rank(seq)
        if self.config.dp_assign == "session_affinity":
            # a session's turn goes where its latest one went; its first by cache_aware
            if session_id not in self._session_rank:
                self._session_rank[session_id] = self._cache_aware_rank(seq)
            return self._session_rank[session_id]
        loads = [sum(max(0, s.prefill_target - s.num_cached) + s.max_new_tokens - s.output_len
                     for s in rank.members) for rank in self._ranks]
        return loads.index(min(loads))

    def _cache_aware_rank(self, seq: ReferenceSequence) -> int:
        """SGLang router's cache_aware policy, its defaults, over DP ranks: imbalanced ranks
        (the most unfinished sequences above the fewest by more than 64 and 1.5 times over)
        send seq to the least loaded; else the rank holding the longest run of its leading
        prompt blocks (ties: the less loaded, then the lower rank), when that run covers
        more than 30 % of the prompt; else the least loaded."""
        loads = [len(rank.members) for rank in self._ranks]
        fewest = loads.index(min(loads))
        if max(loads) - loads[fewest] > 64 and max(loads) > 1.5 * loads[fewest]:
            return fewest
        hits = [len(self._prefix_hit(rank, seq)[0]) for rank in self._ranks]
        best = min(range(len(hits)), key=lambda r: (-hits[r], loads[r], r))
        return best if hits[best] * self.config.block_size > 0.3 * seq.prompt_len else fewest

    # -- schedule ---------------------------------------------------------------------------

    def has_prompt_work(self) -> bool:
        return any(self._would_prefill(rank) for rank in self._ranks)

    def schedule(self, release_gil: bool = True, phase: Optional[str] = None) -> Plan:
        start = time.perf_counter_ns()
        engine_type = self.config.engine_type
        if phase is not None and not (isinstance(phase, str) and phase in PHASES):
            raise ValueError(f"phase must be prompt or decode, got {shown(phase)}")
        mixed = self.config.mixed_batches
        if mixed and phase is not None:
            raise ValueError(f"a mixed_batches engine holds no vote (every step is one mixed "
                             f"round); got phase {phase}")
        if mixed:
            prompt = False  # until a rank schedules a prefill token
        elif engine_type == "normal":
            prompt = phase == "prompt" if phase else self.has_prompt_work()
        else:
            prompt = engine_type == "prompt"
            if phase and (phase == "prompt") != prompt:
                raise ValueError(f"a {engine_type} engine cannot run a {phase} round")
        preempted: List[int] = []
        batches = []
        for rank_id, rank in enumerate(self._ranks):
            builder = _BatchBuilder(rank_id)
            rank.round_hit_tokens = 0
            rank.round_reloaded_blocks = 0
            evicted = rank.pool.num_evicted
            if mixed:
                prompt |= self._mixed_round(rank, builder, preempted)
            elif prompt:
                self._prompt_round(rank, builder, self.config.max_num_batched_tokens)
            else:
                self._decode_round(rank, builder, preempted)
            batches.append(builder.build(rank, rank.pool.num_evicted - evicted))
        plan = Plan(step=self._next_step, phase="prompt" if prompt else "decode", batches=batches,
                    preempted=np.array(preempted, dtype=np.int64),
                    rejected=np.array(self._pending_rejected, dtype=np.int64),
                    sched_start_ns=start, owner=id(self))
        self._pending_rejected = []
        self._next_step += 1
        plan.sched_ns = time.perf_counter_ns() - start
        return plan

    def _would_prefill(self, rank: _Rank) -> bool:
        if rank.prefilling:
            seq = rank.prefilling[0]
        elif rank.waiting:
            seq = rank.waiting[0]
            if rank.num_running >= self.config.max_num_seqs:
                return False
        else:
            return False
        return self._next_chunk(rank, seq, self.config.max_num_batched_tokens) is not None

    def _mixed_round(self, rank: _Rank, builder: "_BatchBuilder", preempted: List[int]) -> bool:
        """Rule 9.15: decode rows first, each costing its q of the token budget, then the
        prompt round's candidates with what is left; a rank that preempted admits nothing
        new (its victims head the first-come, first-served queue). Whether it scheduled a
        prefill token."""
        budget = self.config.max_num_batched_tokens
        victims = len(preempted)
        budget = self._decode_round(rank, builder, preempted, budget)
        decodes = len(builder.rows)
        self._prompt_round(rank, builder, budget, admit=len(preempted) == victims)
        return len(builder.rows) > decodes

    def _prompt_round(self, rank: _Rank, builder: "_BatchBuilder", budget: int,
                      admit: bool = True) -> None:
        """The prompt round's candidates under `budget`; admit: new sequences from the
        queue too."""
        candidates = list(rank.prefilling)
        while True:
            if candidates:
                seq = candidates.pop(0)
            elif admit and rank.waiting:
                seq = rank.waiting[0]
                if rank.num_running >= self.config.max_num_seqs:
                    return
            else:
                return
            if budget == 0:
                return
            chunk = self._next_chunk(rank, seq, budget)
            if chunk is None:
                return
            q, padded, final, need, (shared, reloaded), done = chunk
            if seq.status == "waiting":  # admission: shared prefix blocks come first
                for block in shared:
                    rank.pool.share(block, seq.blocks)
                for block_hash in reloaded:
                    rank.pool.reload(block_hash)
                rank.round_reloaded_blocks += len(reloaded)
                seq.num_cached = done
                seq.prefix_hit_tokens += done
                rank.round_hit_tokens += done
            rank.pool.allocate(need, seq.blocks)
            builder.add(seq, q, padded, seq.num_cached + seq.num_inflight + q,
                        KIND_FINAL if final else KIND_CHUNK)
            seq.num_inflight += q
            if seq.status == "waiting":
                rank.waiting.popleft()
                seq.status = "running"
                rank.num_running += 1
                if not final:
                    _insert_by_order(rank.prefilling, seq)
            elif final:
                rank.prefilling.remove(seq)
            if final:
                seq.inflight_samples += 1
                if self.config.engine_type != "prompt":
                    rank.decoding.append(seq)
            budget -= padded

    def _next_chunk(self, rank: _Rank, seq: ReferenceSequence, budget: int):
        """seq's next chunk as (seqlen_q, padded_q, is_final, new_blocks, (shared_blocks,
        reloaded_hashes), tokens_done), or None to stop. A sequence being admitted starts
        after the prompt blocks it can share or reload (reloaded blocks are new ones)."""
        cfg = self.config
        if seq.status == "waiting":
            shared, reloaded = self._prefix_hit(rank, seq)
            done = (len(shared) + len(reloaded)) * cfg.block_size
            have = len(shared)
        else:
            shared, reloaded = [], []
            done = seq.num_cached + seq.num_inflight
            have = len(seq.blocks)
        # sharing a retained block takes it out of the free count
        free = rank.pool.num_free - sum(rank.pool.refcount(b) == 0 for b in shared)
        remaining = seq.prefill_target - done
        q = min(remaining, budget, cfg.max_prefill_chunk or remaining)
        padded = q
        if cfg.cp_size > 1:
            align = 2 * cfg.cp_size
            if q == remaining:
                padded = -(-q // align) * align
                if padded > budget:
                    q = padded = q // align * align
            else:
                q = padded = q // align * align
        if q == 0:
            return None
        final = q == remaining
        tokens = min(done + q + (self._lookahead if final else 0), seq.footprint)
        need = max(0, self._blocks_for(tokens) - have)
        if need > free:
            return None
        if seq.status == "waiting":
            # Admission reserves what the rank's partial prefills still need to finish, so
            # partial prefills can never hold the pool between them and deadlock.
            reserved = sum(self._prefill_blocks(s) - len(s.blocks) for s in rank.prefilling)
            if self._prefill_blocks(seq) - have > free - reserved:
                return None
        return q, padded, final, need, (shared, reloaded), done

    def _prefix_hit(self, rank: _Rank, seq: ReferenceSequence) -> Tuple[List[int], List[int]]:
        """Indexed blocks holding seq's leading full prompt blocks, and the hashes of the
        host tier's blocks right after them. A hit never covers the whole prefill: the last
        block is then computed again, in a block of its own, to produce the logits (writing
        into a shared block would overwrite its owners' KV)."""
        bs = self.config.block_size
        full = min(len(seq.block_hashes), (seq.prefill_target - 1) // bs)
        shared: List[int] = []
        for block_hash in seq.block_hashes[:full]:
            block = rank.pool.lookup(block_hash)
            if block is None:
                break
            shared.append(block)
        reloaded: List[int] = []
        for block_hash in seq.block_hashes[len(shared):full]:
            if not rank.pool.on_host(block_hash):
                break
            reloaded.append(block_hash)
        return shared, reloaded

    def _index_prompt_blocks(self, rank: _Rank, seq: ReferenceSequence) -> None:
        """Offer seq's committed full prompt blocks to the prefix index."""
        bs = self.config.block_size
        full = min(len(seq.block_hashes), seq.num_cached // bs)
        for i in range(seq.num_indexed, full):
            rank.pool.index(seq.blocks[i], seq.block_hashes[i])
        seq.num_indexed = max(seq.num_indexed, full)

    def _prefill_blocks(self, seq: ReferenceSequence) -> int:
        return self._blocks_for(min(seq.prefill_target + self._lookahead, seq.footprint))

    def _decode_round(self, rank: _Rank, builder: "_BatchBuilder", preempted: List[int],
                      budget: Optional[int] = None) -> int:
        """With a token budget (a mixed round), each row costs its q; once q no longer
        fits, the rest wait, neither scheduled nor preempted. Returns the budget left."""
        if self.config.engine_type == "completion":
            self._admit_prefilled(rank)
        longest_first = self.config.preempt_order == "longest_output"
        ordered = sorted(rank.decoding, key=lambda s: (-s.output_len if longest_first
                                                       else s.output_len, s.order))
        victims = []
        left, right = 0, len(ordered) - 1
        while left <= right:
            seq = ordered[right]
            q = self._decode_q(seq)
            if q == 0:  # waits for its KV or in-flight samples; passed over as a victim too
                right -= 1
                continue
            if budget is not None and budget < q:
                break
            seqlen_k = seq.num_cached + seq.num_inflight + q
            need = self._blocks_for(min(seqlen_k, seq.footprint)) - len(seq.blocks)
            if need <= rank.pool.num_free:
                rank.pool.allocate(need, seq.blocks)
                builder.add(seq, q, q, seqlen_k, KIND_DECODE)
                seq.num_inflight += q
                seq.inflight_samples += 1
                right -= 1
                if budget is not None:
                    budget -= q
                continue
            victim = ordered[left]
            left += 1
            # A victim with work in flight, or KV in transfer, is passed over: both write its
            # blocks.
            if victim.num_inflight == 0 and not victim.kv_pending:
                self._preempt(rank, victim)
                victims.append(victim)
        rank.waiting.extendleft(reversed(victims))
        preempted.extend(v.seq_id for v in victims)
        return 0 if budget is None else budget

    def _decode_q(self, seq: ReferenceSequence) -> int:
        """Positions seq computes in its next decode step; 0 while its KV is in transfer,
        and once its committed output plus one token per in-flight sampling step reaches
        max_new_tokens."""
        if seq.kv_pending or seq.output_len + seq.inflight_samples >= seq.max_new_tokens:
            return 0
        return 1 + self.config.num_mtp

    def _admit_prefilled(self, rank: _Rank) -> None:
        while rank.waiting and rank.num_running < self.config.max_num_seqs:
            seq = rank.waiting[0]
            tokens = min(seq.num_cached + self._lookahead, seq.footprint)
            need = self._blocks_for(tokens) - len(seq.blocks)
            if need > rank.pool.num_free:
                return
            rank.pool.allocate(need, seq.blocks)
            rank.waiting.popleft()
            seq.status = "running"
            rank.num_running += 1
            rank.decoding.append(seq)

    def _preempt(self, rank: _Rank, seq: ReferenceSequence) -> None:
        rank.decoding.remove(seq)
        rank.num_running -= 1
        seq.status = "waiting"
        seq.num_preemptions += 1
        seq.recomputed_tokens += seq.num_cached
        if self.config.engine_type != "completion":  # completion: KV is supplied again
            seq.num_cached = 0
            seq.prefill_target = seq.num_tokens
            seq.num_indexed = 0
        self._release(rank, seq)

    # -- postprocess ------------------------------------------------------------------------

    def postprocess(self, plan: Plan, accepted=None, release_gil: bool = False) -> PostprocessResult:
        if not isinstance(plan, Plan):
            raise ValueError("plan was not made by this scheduler")
        parsed = parse_accepted(plan, accepted)  # its types first, as the C++ binding does
        if plan.owner != id(self):
            raise ValueError("plan was not made by this scheduler")
        if plan.step < self._next_postprocess:
            raise ValueError(f"plan {plan.step} was already post-processed")
        if plan.step > self._next_postprocess:
            raise ValueError(f"plan {plan.step} is not the oldest outstanding plan; "
                             f"post-process plan {self._next_postprocess} first")
        drafts = check_accepted(plan, parsed)
        done = _Postprocessed()
        i = 0
        for batch in plan.batches:
            rank = self._ranks[batch.rank]
            for seq_id, q, kind in zip(batch.seq_ids.tolist(), batch.seqlen_q.tolist(),
                                       batch.kind.tolist()):
                self._postprocess_row(rank, self._seqs[seq_id], q, kind, int(drafts[i]), done)
                i += 1
        done.left += [_record(self._seqs[seq_id]) for seq_id in plan.rejected.tolist()]
        self._next_postprocess += 1
        return PostprocessResult(plan.step, np.array(done.finished, dtype=np.int64),
                                 done.discarded, np.array(done.output_len, dtype=np.int32),
                                 done.left)

    def _postprocess_row(self, rank: _Rank, seq: ReferenceSequence, q: int, kind: int, a: int,
                         done: "_Postprocessed") -> None:
        """One planned row's work committed: `a` of its drafts accepted."""
        seq.num_inflight -= q
        if seq.status == "finished":  # finished while this work was in flight
            done.discarded += q
            done.output_len.append(seq.output_len)
            if seq.num_inflight == 0:
                self._release(rank, seq)
            return
        if kind == KIND_CHUNK:
            seq.num_cached += q
            done.output_len.append(seq.output_len)
            if seq.block_hashes:
                self._index_prompt_blocks(rank, seq)
            return
        seq.inflight_samples -= 1
        cap = seq.prompt_len + seq.max_new_tokens
        gained = 1 + a
        seq.num_cached = min(seq.num_cached + (q if kind == KIND_FINAL else gained), cap)
        seq.num_tokens = min(seq.num_tokens + gained, cap)
        if kind == KIND_FINAL and seq.block_hashes:
            self._index_prompt_blocks(rank, seq)
        done.output_len.append(seq.output_len)
        if self.config.engine_type == "prompt" or seq.output_len >= seq.max_new_tokens:
            self._finish(rank, seq)
            done.finished.append(seq.seq_id)
            done.left.append(_record(seq))

    def _finish(self, rank: _Rank, seq: ReferenceSequence) -> None:
        if seq in rank.decoding:
            rank.decoding.remove(seq)
        rank.num_running -= 1
        rank.members.discard(seq)
        self._num_unfinished -= 1
        seq.status = "finished"
        if seq.num_inflight == 0:
            self._release(rank, seq)

    # -- blocks and queries -----------------------------------------------------------------

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def seq(self, seq_id: int) -> ReferenceSequence:
        seq_id = integer("seq_id", seq_id)
        if seq_id not in self._seqs:
            raise ValueError(f"unknown seq_id {seq_id}")
        return self._seqs[seq_id]

    def num_free_blocks(self, rank: int = 0) -> int:
        return self._rank_at(integer("rank", rank)).pool.num_free

    def refcount(self, block: int, rank: int = 0) -> int:
        block, rank = integer("block", block), integer("rank", rank)
        if not 0 <= block < self.config.num_kv_blocks:
            raise ValueError(f"block {block} is outside 0..{self.config.num_kv_blocks - 1}")
        return self._rank_at(rank).pool.refcount(block)

    def _rank_at(self, rank: int) -> _Rank:
        if not 0 <= rank < self.config.dp_size:
            raise ValueError(f"rank {rank} is outside 0..{self.config.dp_size - 1}")
        return self._ranks[rank]

    def is_finished(self) -> bool:
        """Every sequence finished or rejected, and every rejection reported in a plan.

        Plans may still be outstanding (overlap): post-process them before reading the
        final block counts."""
        return self._num_unfinished == 0 and not self._pending_rejected

    @property
    def num_outstanding_plans(self) -> int:
        return self._next_step - self._next_postprocess


class _BatchBuilder:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.rows: list = []

    def add(self, seq: ReferenceSequence, q: int, padded: int, seqlen_k: int, kind: int) -> None:
        self.rows.append((seq.seq_id, q, seqlen_k, padded, kind, list(seq.blocks)))

    def build(self, rank: _Rank, evicted: int) -> Batch:
        n = len(self.rows)
        width = max((len(r[5]) for r in self.rows), default=0)
        tables = np.full((n, width), -1, dtype=np.int32)
        for i, row in enumerate(self.rows):
            tables[i, :len(row[5])] = row[5]
        cols = list(zip(*self.rows)) if self.rows else [()] * 5
        return Batch(rank=self.rank,
                     seq_ids=np.array(cols[0], dtype=np.int64),
                     seqlen_q=np.array(cols[1], dtype=np.int32),
                     seqlen_k=np.array(cols[2], dtype=np.int32),
                     padded_q=np.array(cols[3], dtype=np.int32),
                     kind=np.array(cols[4], dtype=np.int8),
                     block_tables=tables,
                     kv_blocks_free=rank.pool.num_free, num_waiting=len(rank.waiting),
                     num_running=rank.num_running, num_hit_tokens=rank.round_hit_tokens,
                     num_reloaded_blocks=rank.round_reloaded_blocks,
                     num_evicted_blocks=evicted, num_retained_blocks=rank.pool.num_retained)


def _record(seq: ReferenceSequence) -> SeqRecord:
    return SeqRecord(seq.seq_id, seq.dp_rank, seq.status, seq.output_len, seq.num_preemptions,
                     seq.recomputed_tokens, seq.prefix_hit_tokens, seq.reason)


def _insert_by_order(seqs: List[ReferenceSequence], seq: ReferenceSequence) -> None:
    i = len(seqs)
    while i > 0 and seqs[i - 1].order > seq.order:
        i -= 1
    seqs.insert(i, seq)

