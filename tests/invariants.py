"""The invariants of docs/scheduling.md, checked through the public API after every schedule() and
postprocess() call. Works on any scheduler with the reference's API (C++ or Python)."""

from collections import Counter

from engine import KIND_CHUNK, KIND_DECODE, KIND_FINAL

STATUSES = ("waiting", "running", "finished", "rejected")


def blocks_for(cfg, tokens):
    return -(-tokens // cfg.block_size)


def footprint(cfg, prompt_len, max_new_tokens):
    """Most tokens whose KV a sequence can ever hold (sections 9.1, 9.8): a prompt engine
    never decodes; MTP drafts past the footprint get no KV slot (their tokens would be
    beyond max_new_tokens)."""
    if cfg.engine_type == "prompt":
        return prompt_len
    return prompt_len + max(max_new_tokens, cfg.lookahead)


def check_invariants(sched, cfg, seq_ids, plan=None):
    """Assert the state invariants over `seq_ids` (every sequence added so far) of a
    scheduler built from SchedulerConfig `cfg` (the C++ Scheduler does not expose its
    config); with `plan`, which must be the plan schedule() just returned, also the plan's."""
    seqs = {i: sched.seq(i) for i in seq_ids}
    owned = [[] for _ in range(cfg.dp_size)]
    for i, s in seqs.items():
        blocks = list(s.blocks)
        where = f"seq {i} ({s.status})"
        assert s.status in STATUSES, where
        assert 0 <= s.dp_rank < cfg.dp_size, f"{where}: dp_rank {s.dp_rank}"
        if s.status == "rejected":
            assert s.reason, f"{where}: no reason"
            assert not blocks, f"{where}: owns blocks {blocks}"
        if s.status == "waiting":
            # Preemption passes over victims with work in flight, so waiting means idle.
            assert not blocks, f"{where}: owns blocks {blocks}"
            assert s.num_inflight == 0, f"{where}: num_inflight {s.num_inflight}"
        if s.kv_pending:  # KV in transfer (9.14): admitted or not, it has computed nothing
            assert s.status in ("waiting", "running"), f"{where}: awaits its KV"
            assert s.num_inflight == 0 and s.output_len == 1, \
                f"{where}: awaits its KV with {s.num_inflight} in flight, output {s.output_len}"
        assert s.num_inflight >= 0, f"{where}: num_inflight {s.num_inflight}"
        assert s.num_cached <= s.num_tokens, f"{where}: cached {s.num_cached} > tokens {s.num_tokens}"
        assert s.output_len == s.num_tokens - s.prompt_len, f"{where}: output_len {s.output_len}"
        assert 0 <= s.output_len <= s.max_new_tokens, f"{where}: output_len {s.output_len}"
        limit = blocks_for(cfg, footprint(cfg, s.prompt_len, s.max_new_tokens))
        assert len(blocks) <= limit, f"{where}: {len(blocks)} blocks > footprint's {limit}"
        owned[s.dp_rank].extend(blocks)
    for rank, blocks in enumerate(owned):
        free = sched.num_free_blocks(rank)
        for block, owners in Counter(blocks).items():
            assert sched.refcount(block, rank) == owners, \
                f"rank {rank}: block {block} has {owners} owners, refcount {sched.refcount(block, rank)}"
        assert free + len(set(blocks)) == cfg.num_kv_blocks, \
            f"rank {rank}: {free} free + {len(set(blocks))} owned != {cfg.num_kv_blocks}"
        assert all(0 <= b < cfg.num_kv_blocks for b in blocks), f"rank {rank}: block id out of range"
    if plan is not None:
        _check_plan(sched, cfg, seqs, plan)


def _check_plan(sched, cfg, seqs, plan):
    assert plan.phase in ("prompt", "decode"), plan.phase
    prompt = plan.phase == "prompt"
    assert [b.rank for b in plan.batches] == list(range(cfg.dp_size))
    align = 2 * cfg.cp_size
    scheduled = []
    prefilled = False  # any rank scheduled a prefill token
    for b in plan.batches:
        n = len(b.seq_ids)
        where = f"step {plan.step} rank {b.rank}"
        assert b.empty == (n == 0), where
        assert n <= cfg.max_num_seqs, f"{where}: {n} rows > max_num_seqs"
        assert len(b.seqlen_q) == len(b.seqlen_k) == len(b.padded_q) == len(b.kind) == n, where
        assert b.block_tables.shape[0] == n, f"{where}: {b.block_tables.shape[0]} table rows"
        assert (b.seqlen_q >= 1).all() and (b.padded_q >= b.seqlen_q).all(), where
        decodes = b.kind == KIND_DECODE
        prefilled |= not decodes.all()
        if cfg.mixed_batches:
            # 9.15: decode rows, then prefill rows, all of them within the token budget
            assert decodes[:int(decodes.sum())].all(), f"{where}: a decode row after a chunk"
            assert b.padded_q.sum() <= cfg.max_num_batched_tokens, \
                f"{where}: {b.padded_q.sum()} tokens, decode rows included, over the budget"
            assert (b.seqlen_q[decodes] == 1 + cfg.num_mtp).all() \
                and (b.padded_q[decodes] == b.seqlen_q[decodes]).all(), f"{where}: decode q"
            if cfg.cp_size > 1:
                assert (b.padded_q[~decodes] % align == 0).all(), f"{where}: padded_q not aligned"
                chunks = b.seqlen_q[b.kind == KIND_CHUNK]
                assert (chunks % align == 0).all(), f"{where}: non-final chunk not aligned"
        elif prompt:
            assert set(b.kind.tolist()) <= {KIND_CHUNK, KIND_FINAL}, f"{where}: decode row"
            assert b.padded_q.sum() <= cfg.max_num_batched_tokens, f"{where}: over budget"
            if cfg.cp_size > 1:
                assert (b.padded_q % align == 0).all(), f"{where}: padded_q not aligned"
                chunks = b.seqlen_q[b.kind == KIND_CHUNK]
                assert (chunks % align == 0).all(), f"{where}: non-final chunk not aligned"
        else:
            assert (b.kind == KIND_DECODE).all(), f"{where}: prefill row in a decode step"
            assert (b.seqlen_q <= 1 + cfg.num_mtp).all(), f"{where}: seqlen_q {b.seqlen_q}"
        for row, seq_id in enumerate(b.seq_ids.tolist()):
            s = seqs[seq_id]
            blocks = list(s.blocks)
            table = b.block_tables[row].tolist()
            at = f"{where} seq {seq_id}"
            assert s.dp_rank == b.rank, f"{at}: seq is on rank {s.dp_rank}"
            assert s.status == "running", f"{at}: scheduled while {s.status}"
            assert not s.kv_pending, f"{at}: scheduled while its KV is in transfer"
            assert table == blocks + [-1] * (len(table) - len(blocks)), f"{at}: table {table} != {blocks}"
            # MTP drafts past the footprint have no KV slot (see footprint()).
            covered = min(int(b.seqlen_k[row]), footprint(cfg, s.prompt_len, s.max_new_tokens))
            assert blocks_for(cfg, covered) <= len(blocks), \
                f"{at}: {len(blocks)} blocks for seqlen_k {b.seqlen_k[row]}"
        scheduled += b.seq_ids.tolist()
        on_rank = [s.status for s in seqs.values() if s.dp_rank == b.rank]
        assert b.kv_blocks_free == sched.num_free_blocks(b.rank), where
        assert b.num_waiting == on_rank.count("waiting"), f"{where}: num_waiting {b.num_waiting}"
        assert b.num_running == on_rank.count("running"), f"{where}: num_running {b.num_running}"
        assert b.num_running <= cfg.max_num_seqs, f"{where}: num_running {b.num_running}"
        # A retained block (cached, unowned) counts as free, never as owned too.
        assert 0 <= b.num_retained_blocks <= b.kv_blocks_free, \
            f"{where}: {b.num_retained_blocks} retained of {b.kv_blocks_free} free"
        assert b.num_evicted_blocks >= 0 and b.num_hit_tokens >= 0, where
        assert prompt or b.num_hit_tokens == 0, f"{where}: prefix hits in a decode round"
        # reloaded blocks are whole blocks of the round's hits, and need a host tier
        assert 0 <= b.num_reloaded_blocks * cfg.block_size <= b.num_hit_tokens, \
            f"{where}: {b.num_reloaded_blocks} reloaded blocks, {b.num_hit_tokens} hit tokens"
        assert cfg.host_kv_blocks or b.num_reloaded_blocks == 0, where
        if not cfg.prefix_caching:
            assert b.num_retained_blocks == b.num_evicted_blocks == b.num_hit_tokens == 0, where
    assert len(set(scheduled)) == len(scheduled), f"step {plan.step}: a sequence appears twice"
    if cfg.mixed_batches:  # 9.15: the phase says whether any rank prefilled
        assert prompt == prefilled, f"step {plan.step}: phase {plan.phase}"
    # a victim is not scheduled again in the step that preempts it
    assert not set(plan.preempted.tolist()) & set(scheduled), plan.preempted
    assert all(seqs[i].status == "waiting" for i in plan.preempted.tolist()), plan.preempted
    # kv_pending never turns true again, so a victim that has it now had it when preempted
    assert not any(seqs[i].kv_pending for i in plan.preempted.tolist()), plan.preempted
    assert all(seqs[i].status == "rejected" for i in plan.rejected.tolist()), plan.rejected


def snapshot(sched, seq_ids):
    """(num_cached, num_inflight) per sequence; take it just before schedule()."""
    return {i: (sched.seq(i).num_cached, sched.seq(i).num_inflight) for i in seq_ids}


def check_seqlen_k(sched, plan, before):
    """seqlen_k == num_cached + num_inflight + seqlen_q, with the counters as the plan made
    them: num_inflight as of `before` (the plan adds seqlen_q), num_cached as of now (equal
    to `before` but for an admission that starts after shared prefix blocks)."""
    for b in plan.batches:
        hits = 0
        for seq_id, q, k in zip(b.seq_ids.tolist(), b.seqlen_q.tolist(), b.seqlen_k.tolist()):
            cached, inflight = before[seq_id]
            now = sched.seq(seq_id)
            hit = now.num_cached - cached
            # An admission after shared blocks: never the last block of what it prefills.
            assert hit <= min(now.prompt_len, now.num_tokens - 1), \
                f"step {plan.step} seq {seq_id}: {hit} hit tokens, prompt {now.prompt_len}"
            hits += hit
            assert now.num_inflight == inflight + q, \
                f"step {plan.step} seq {seq_id}: num_inflight {inflight} -> {now.num_inflight} for q {q}"
            assert now.num_cached == cached or (cached == 0 and now.prefix_hit_tokens > 0), \
                f"step {plan.step} seq {seq_id}: num_cached {cached} -> {now.num_cached}"
            assert k == now.num_cached + inflight + q, \
                f"step {plan.step} seq {seq_id}: seqlen_k {k} != {now.num_cached} + {inflight} + {q}"
        assert b.num_hit_tokens == hits, f"step {plan.step} rank {b.rank}: num_hit_tokens"
