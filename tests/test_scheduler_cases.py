"""Hand-computed cases for each rule of docs/scheduling.md, on both schedulers."""

import pytest

from engine import KIND_CHUNK, KIND_DECODE, KIND_FINAL
from tests.helpers import IMPLS, make_requests, make_scheduler, rows

pytestmark = [pytest.mark.parametrize("impl", IMPLS), pytest.mark.core]


def run_step(s, accepted=None, phase=None):
    plan = s.schedule(phase=phase)
    result = s.postprocess(plan, accepted)
    return plan, result


def test_chunked_prefill_resumes_from_checkpoints(impl):
    s = make_scheduler(impl)  # budget 16
    a, b = make_requests(s, (40, 2), (4, 2))
    p0, _ = run_step(s)
    assert rows(p0) == [(a, 16, 16)]  # A takes the whole budget; B waits (FCFS)
    assert p0.batches[0].kind.tolist() == [KIND_CHUNK]
    assert (s.seq(a).num_cached, s.seq(a).num_tokens) == (16, 40)  # no token sampled
    p1, _ = run_step(s)
    assert rows(p1) == [(a, 16, 32)]
    p2, _ = run_step(s)
    assert rows(p2) == [(a, 8, 40), (b, 4, 4)]  # A's final chunk, then B in the rest
    assert p2.batches[0].kind.tolist() == [KIND_FINAL, KIND_FINAL]
    assert (s.seq(a).num_cached, s.seq(a).num_tokens) == (40, 41)


def test_max_prefill_chunk_caps_one_sequence(impl):
    s = make_scheduler(impl, max_prefill_chunk=10)
    a, b = make_requests(s, (25, 1), (3, 1))
    p0, _ = run_step(s)
    assert rows(p0) == [(a, 10, 10), (b, 3, 3)]
    p1, _ = run_step(s)
    assert rows(p1) == [(a, 10, 20)]
    p2, r2 = run_step(s)
    assert rows(p2) == [(a, 5, 25)]
    assert r2.finished.tolist() == [a]


def test_context_parallel_alignment(impl):
    s = make_scheduler(impl, cp_size=2)  # align to 4, budget 16
    a, b = make_requests(s, (10, 1), (6, 1))
    p0, _ = run_step(s)
    # A's final chunk 10 is charged padded to 12; B gets 4 left, a non-final aligned chunk.
    assert rows(p0) == [(a, 10, 10), (b, 4, 4)]
    assert p0.batches[0].padded_q.tolist() == [12, 4]
    p1, _ = run_step(s)
    assert rows(p1) == [(b, 2, 6)]
    assert p1.batches[0].padded_q.tolist() == [4]


def test_padded_final_chunk_falls_back_to_aligned_chunk(impl):
    s = make_scheduler(impl, cp_size=2, max_num_batched_tokens=10)
    (a,) = make_requests(s, (9, 1))
    p0, _ = run_step(s)
    # Final chunk 9 would be charged 12 > 10: fall back to the largest aligned chunk, 8.
    assert rows(p0) == [(a, 8, 8)] and p0.batches[0].kind.tolist() == [KIND_CHUNK]
    p1, _ = run_step(s)
    assert rows(p1) == [(a, 1, 9)] and p1.batches[0].padded_q.tolist() == [4]


@pytest.mark.parametrize("overrides, blocks", [
    ({}, 3),                                # 8 + lookahead 1 = 9 tokens
    ({"lookahead_slots": 0}, 2),            # 8 tokens
    ({"overlap": True}, 3),                 # 8 + 2 = 10
    ({"overlap": True, "num_mtp": 1}, 3),   # 8 + (1 + 1) * 2 = 12
    ({"overlap": True, "num_mtp": 2}, 4),   # 8 + 3 * 2 = 14
])
def test_lookahead_reserved_by_the_final_chunk(impl, overrides, blocks):
    s = make_scheduler(impl, block_size=4, **overrides)
    (a,) = make_requests(s, (8, 20))
    plan = s.schedule()
    assert len(s.seq(a).blocks) == blocks
    assert (plan.batches[0].block_tables[0] >= 0).sum() == blocks


def test_kv_capacity_stops_admission_first_come_first_served(impl):
    s = make_scheduler(impl, block_size=4, num_kv_blocks=4)
    a, b, c = make_requests(s, (8, 4), (8, 4), (1, 2))
    p0 = s.schedule()
    # A takes 3 blocks (8 + lookahead 1); B needs 3 more but 1 is free: admission stops,
    # and C, which would fit, is not let ahead of B.
    assert rows(p0) == [(a, 8, 8)]
    assert p0.batches[0].num_waiting == 2


def test_never_fitting_request_is_rejected_and_does_not_block(impl):
    s = make_scheduler(impl, block_size=4, num_kv_blocks=4)  # 16 tokens per rank
    big, small = make_requests(s, (10, 7), (4, 4))  # big needs 17 tokens: 5 blocks
    assert s.seq(big).status == "rejected"
    assert "5 KV blocks" in s.seq(big).reason and "has 4" in s.seq(big).reason
    p0, _ = run_step(s)
    assert p0.rejected.tolist() == [big]
    assert rows(p0) == [(small, 4, 4)]
    p1 = s.schedule()
    assert p1.rejected.tolist() == []  # reported once


def test_rejection_alone_is_not_prompt_work(impl):
    s = make_scheduler(impl, num_kv_blocks=1)
    (big,) = make_requests(s, (40, 1))
    assert not s.is_finished()  # the rejection is not reported yet
    plan = s.schedule()
    assert plan.phase == "decode" and plan.batches[0].empty
    assert plan.rejected.tolist() == [big]
    s.postprocess(plan)
    assert s.is_finished()


def test_max_num_seqs_bounds_running_and_admitted(impl):
    s = make_scheduler(impl, max_num_seqs=2)
    a, b, c = make_requests(s, (2, 3), (2, 3), (2, 3))
    p0, _ = run_step(s)
    assert rows(p0) == [(a, 2, 2), (b, 2, 2)]
    p1, _ = run_step(s)
    assert p1.phase == "decode"  # C cannot be admitted: no prompt work anywhere
    assert p1.batches[0].seq_ids.tolist() == [b, a]


def test_prompt_engine_hands_off_after_first_token(impl):
    s = make_scheduler(impl, engine_type="prompt", block_size=4, num_kv_blocks=8)
    a, b = make_requests(s, (6, 50), (3, 50))  # M is irrelevant: footprint is the prompt
    p0, r0 = run_step(s)
    assert p0.phase == "prompt" and rows(p0) == [(a, 6, 6), (b, 3, 3)]
    assert len(p0.batches[0].block_tables[0][p0.batches[0].block_tables[0] >= 0]) == 2  # no lookahead
    assert r0.finished.tolist() == [a, b]
    assert [s.seq(i).status for i in (a, b)] == ["finished", "finished"]
    assert s.seq(a).output_len == 1
    assert s.num_free_blocks() == 8
    assert s.schedule().phase == "prompt"  # never decodes


def test_completion_engine_admits_prefilled_and_decodes_same_step(impl):
    s = make_scheduler(impl, engine_type="completion")
    a, single = make_requests(s, (6, 3), (5, 1))
    assert (s.seq(a).num_tokens, s.seq(a).num_cached) == (7, 6)  # arrives prefilled
    assert s.seq(single).status == "finished"  # its only token came with it
    p0, _ = run_step(s)
    assert p0.phase == "decode" and rows(p0) == [(a, 1, 7)]
    p1, r1 = run_step(s)
    assert rows(p1) == [(a, 1, 8)]
    assert r1.finished.tolist() == [a] and s.seq(a).output_len == 3


def test_completion_preemption_keeps_kv_as_resupplied(impl):
    s = make_scheduler(impl, engine_type="completion", block_size=1, num_kv_blocks=6)
    a, b = make_requests(s, (2, 4), (2, 4))
    p0, _ = run_step(s)  # both admitted with 2 + 1 blocks, both decode
    assert sorted(p0.batches[0].seq_ids.tolist()) == [a, b]
    p1 = s.schedule()  # each needs a 4th block, none free: B (shorter? tie -> later) first
    assert p1.preempted.tolist() == [a]
    assert rows(p1) == [(b, 1, 4)]
    seq_a = s.seq(a)
    assert (seq_a.status, seq_a.num_tokens, seq_a.num_cached) == ("waiting", 4, 3)
    assert seq_a.recomputed_tokens == 3 and seq_a.num_preemptions == 1


def test_kv_in_transfer_counts_against_max_num_seqs(impl):
    # 9.14: admission is the reservation, a running sequence that computes nothing.
    s = make_scheduler(impl, engine_type="completion", max_num_seqs=1)
    r = s.add_sequence(seq_id=0, prompt_len=5, max_new_tokens=3, kv_transfer=True).seq_id
    (a,) = make_requests(s, (4, 3), start_id=1)
    p0, _ = run_step(s)
    assert p0.batches[0].empty and (p0.batches[0].num_running, p0.batches[0].num_waiting) == (1, 1)
    assert (s.seq(r).status, s.seq(r).kv_pending, s.seq(a).status) == ("running", True, "waiting")
    s.kv_arrived(r)
    assert not s.seq(r).kv_pending
    p1, _ = run_step(s)
    assert rows(p1) == [(r, 1, 6)]


def test_kv_arrived_before_admission_makes_an_ordinary_arrival(impl):
    s = make_scheduler(impl, engine_type="completion")
    r = s.add_sequence(seq_id=0, prompt_len=5, max_new_tokens=3, kv_transfer=True).seq_id
    s.kv_arrived(r)  # still waiting: admitted and decoded in the same step (9.13)
    assert (s.seq(r).status, s.seq(r).kv_pending) == ("waiting", False)
    p0, _ = run_step(s)
    assert rows(p0) == [(r, 1, 6)]


def test_kv_in_transfer_is_never_a_victim(impl):
    # shortest_output: victims from the left, R (output 1) first; its KV is being written,
    # so it is passed over and A is preempted instead.
    s = make_scheduler(impl, engine_type="completion", preempt_order="shortest_output",
                       block_size=1, num_kv_blocks=9)
    a = s.add_sequence(seq_id=0, prompt_len=2, max_new_tokens=4).seq_id
    r = s.add_sequence(seq_id=1, prompt_len=2, max_new_tokens=4, kv_transfer=True).seq_id
    b = s.add_sequence(seq_id=2, prompt_len=2, max_new_tokens=4).seq_id
    p0, _ = run_step(s)  # each admitted with 2 + 1 blocks: none free; R decodes nothing
    assert rows(p0) == [(b, 1, 3), (a, 1, 3)]
    p1 = s.schedule()  # B needs a 4th block: R passed over, A preempted
    assert p1.preempted.tolist() == [a] and rows(p1) == [(b, 1, 4)]
    assert (s.seq(r).status, len(s.seq(r).blocks), s.seq(r).num_preemptions) == ("running", 3, 0)


def test_preempted_sequence_recomputes_its_tokens(impl):
    s = make_scheduler(impl, block_size=1, num_kv_blocks=6)
    a, b = make_requests(s, (2, 4), (2, 4))
    run_step(s)  # prompt: 3 blocks each (2 + lookahead 1)
    p1 = s.schedule()  # decode: seqlen_k 3, no new block
    assert rows(p1) == [(b, 1, 3), (a, 1, 3)]
    s.postprocess(p1)
    p2 = s.schedule()  # seqlen_k 4: one more block each, none free: A (tie: earlier) is victim
    assert p2.preempted.tolist() == [a] and rows(p2) == [(b, 1, 4)]
    assert (s.seq(a).num_cached, s.seq(a).prefill_target, s.seq(a).num_tokens) == (0, 4, 4)
    s.postprocess(p2)
    p3, r3 = run_step(s)  # A needs 4 + 1 blocks to come back, 2 are free: B finishes first
    assert rows(p3) == [(b, 1, 5)] and r3.finished.tolist() == [b]
    p4 = s.schedule()  # A, at the front of the queue, recomputes its 4 tokens
    assert p4.phase == "prompt" and rows(p4) == [(a, 4, 4)]


def test_dp_vote_empty_prompt_and_decode_steps(impl):
    s = make_scheduler(impl, dp_size=2)
    s.add_sequence(seq_id=10, prompt_len=6, max_new_tokens=5)  # rank 0 (round robin)
    p0, _ = run_step(s)
    assert p0.phase == "prompt"
    assert not p0.batches[0].empty and p0.batches[1].empty  # rank 1: empty prompt step
    p1, _ = run_step(s)
    assert p1.phase == "decode" and p1.batches[1].empty  # rank 1: empty decode step
    s.add_sequence(seq_id=11, prompt_len=3, max_new_tokens=5)  # rank 1
    p2, _ = run_step(s)
    # Rank 1's prefill wins the vote: rank 0's decode stalls for an empty prompt step.
    assert p2.phase == "prompt"
    assert p2.batches[0].empty and rows(p2, 1) == [(11, 3, 3)]
    p3, _ = run_step(s)
    assert p3.phase == "decode" and rows(p3, 0) == [(10, 1, 8)] and rows(p3, 1) == [(11, 1, 4)]


def test_least_loaded_assignment(impl):
    s = make_scheduler(impl, dp_size=3, dp_assign="least_loaded")
    s.add_sequence(seq_id=0, prompt_len=100, max_new_tokens=10)  # loads 0,0,0 -> rank 0
    s.add_sequence(seq_id=1, prompt_len=5, max_new_tokens=5)  # 110,0,0 -> rank 1
    s.add_sequence(seq_id=2, prompt_len=50, max_new_tokens=5)  # 110,10,0 -> rank 2
    s.add_sequence(seq_id=3, prompt_len=1, max_new_tokens=1)  # 110,10,55 -> rank 1
    assert [s.seq(i).dp_rank for i in range(4)] == [0, 1, 2, 1]


def test_cache_aware_assignment(impl):
    """docs/scheduling.md, "DP ranks": the longest prefix hit over 30 % of the prompt wins,
    else the rank with the fewest unfinished sequences."""
    s = make_scheduler(impl, dp_size=2, dp_assign="cache_aware", block_size=4,
                       max_num_batched_tokens=64)

    def add(seq_id, prompt_len, hash_ids):
        return s.add_sequence(seq_id=seq_id, prompt_len=prompt_len, max_new_tokens=4,
                              hash_ids=hash_ids).dp_rank
    assert add(0, 16, [1, 2, 3, 4]) == 0  # no hit anywhere: loads 0, 0 -> rank 0
    run_step(s)  # its prompt blocks committed and indexed on rank 0
    # hits 3 blocks (12 of 16 tokens > 4.8) on rank 0, though rank 1 is idle
    assert add(1, 16, [1, 2, 3, 9]) == 0
    assert add(2, 16, [7, 8, 9, 10]) == 1  # no hit: loads 2, 0 -> rank 1
    # 1 block (4 tokens) is not over 30 % of 40: the least loaded, rank 1 (loads 2, 1)
    assert add(3, 40, [1, 20, 21, 22, 23, 24, 25, 26, 27, 28]) == 1


def test_cache_aware_gives_way_to_balance(impl):
    """Every sequence hits rank 0's cache until rank 0 holds more than 64 sequences over
    rank 1 (and 1.5 times as many): then the next goes to rank 1."""
    s = make_scheduler(impl, dp_size=2, dp_assign="cache_aware", block_size=4,
                       max_num_batched_tokens=64, max_num_seqs=1)
    s.add_sequence(seq_id=0, prompt_len=16, max_new_tokens=4, hash_ids=[1, 2, 3, 4])
    run_step(s)
    ranks = [s.add_sequence(seq_id=i, prompt_len=16, max_new_tokens=4,
                            hash_ids=[1, 2, 3, 100 + i]).dp_rank for i in range(1, 67)]
    assert ranks == [0] * 64 + [1, 0]  # rank 0 at 65 vs 0: rank 1; at 65 vs 1: 64, not over


def test_session_affinity_keeps_a_sessions_turns_on_its_rank(impl):
    """docs/scheduling.md, "DP ranks": a session's turn goes to the rank its latest turn
    went to, whatever the caches and loads; a first turn, or a sequence of no session, by
    cache_aware."""
    s = make_scheduler(impl, dp_size=2, dp_assign="session_affinity", block_size=4,
                       max_num_batched_tokens=64)

    def add(seq_id, hash_ids, session_id=-1):
        return s.add_sequence(seq_id=seq_id, prompt_len=16, max_new_tokens=4,
                              hash_ids=hash_ids, session_id=session_id).dp_rank
    assert add(0, [1, 2, 3, 4], session_id=5) == 0  # cache_aware: no hit, loads 0, 0
    assert add(1, [7, 8, 9, 10], session_id=6) == 1  # cache_aware: no hit, loads 1, 0
    run_step(s)  # both prompts' blocks indexed on their ranks
    # session 6's turn leads with session 5's blocks (cache_aware: rank 0), yet stays on 1
    assert add(2, [1, 2, 3, 11], session_id=6) == 1
    assert add(3, [1, 2, 3, 12]) == 0  # no session: cache_aware, the hit on rank 0
    assert add(4, [7, 8, 9, 14], session_id=5) == 0  # hits rank 1's blocks, but 5's is 0
    assert add(5, [1, 2, 3, 13], session_id=7) == 0  # a first turn: cache_aware
    with pytest.raises(ValueError, match="session_id must be >= -1, got -2"):
        add(6, [30, 31, 32, 33], session_id=-2)


def test_mtp_accepted_drafts(impl):
    s = make_scheduler(impl, num_mtp=2)
    (a,) = make_requests(s, (4, 10))
    run_step(s)
    assert (s.seq(a).num_cached, s.seq(a).num_tokens) == (4, 5)
    p1, _ = run_step(s, accepted=[2])
    assert rows(p1) == [(a, 3, 7)] and p1.batches[0].kind.tolist() == [KIND_DECODE]
    assert (s.seq(a).num_cached, s.seq(a).num_tokens) == (7, 8)
    p2, _ = run_step(s, accepted=[[1]])  # one sequence per rank is accepted too
    assert rows(p2) == [(a, 3, 10)]
    assert (s.seq(a).num_cached, s.seq(a).num_tokens) == (9, 10)
    p3, r3 = run_step(s, accepted=[2])
    assert rows(p3) == [(a, 3, 12)]
    assert (s.seq(a).num_cached, s.seq(a).num_tokens, s.seq(a).output_len) == (12, 13, 9)
    p4, r4 = run_step(s, accepted=[2])  # needs one token, all drafts accepted: capped at P + M
    assert rows(p4) == [(a, 3, 15)]
    assert (s.seq(a).num_cached, s.seq(a).num_tokens) == (14, 14)
    assert r4.finished.tolist() == [a]


def test_overlap_mtp_discards_work_of_a_finished_sequence(impl):
    s = make_scheduler(impl, num_mtp=1, overlap=True)
    (a,) = make_requests(s, (2, 3))
    p0 = s.schedule()  # prompt: 2 tokens in flight, one sample to come
    p1 = s.schedule()  # 0 + 1 in-flight sample < 3: decode q = 2, seqlen_k 0 + 2 + 2
    assert rows(p1) == [(a, 2, 4)]
    s.postprocess(p0)  # output 1
    p2 = s.schedule()  # 1 + 1 < 3: scheduled again, seqlen_k 2 + 2 + 2
    assert rows(p2) == [(a, 2, 6)]
    r1 = s.postprocess(p1, accepted=[1])  # 1 + 2 = 3: finished early by the accepted draft
    assert r1.finished.tolist() == [a] and s.seq(a).status == "finished"
    assert len(s.seq(a).blocks) > 0  # kept while p2 is in flight
    r2 = s.postprocess(p2, accepted=[1])
    assert r2.discarded_tokens == 2 and r2.finished.tolist() == []
    assert len(s.seq(a).blocks) == 0 and s.num_free_blocks() == 1024
    assert s.seq(a).output_len == 3


def test_victim_with_work_in_flight_is_passed_over(impl):
    # Overlap: each victim's KV is being written by the forward in flight: never freed.
    s = make_scheduler(impl, overlap=True, block_size=1, num_kv_blocks=8)
    a, b = make_requests(s, (1, 7), (1, 7))  # footprint 1 + 7 tokens: fits the 8 blocks
    p0 = s.schedule()  # prompt: 1 + lookahead 2 = 3 blocks each; 2 free
    p1 = s.schedule()  # decode seqlen_k 0 + 1 + 1 = 2: no new blocks
    s.postprocess(p0)
    p2 = s.schedule()  # seqlen_k 1 + 1 + 1 = 3: still none
    s.postprocess(p1)
    p3 = s.schedule()  # seqlen_k 2 + 1 + 1 = 4: one block each, 2 free
    s.postprocess(p2)
    assert s.num_free_blocks() == 0
    p4 = s.schedule()  # seqlen_k 5: none free; A (the victim) has p3 in flight: passed over
    assert p4.preempted.tolist() == [] and p4.batches[0].empty
    assert [x.phase for x in (p0, p1, p2, p3)] == ["prompt", "decode", "decode", "decode"]


def test_prefix_caching_shares_committed_prompt_blocks(impl):
    s = make_scheduler(impl, block_size=4)
    s.add_sequence(seq_id=0, prompt_len=10, max_new_tokens=5, hash_ids=[1, 2, 3])
    run_step(s)  # A's prompt is committed: its two full blocks join the prefix index
    a_blocks = list(s.seq(0).blocks)
    s.add_sequence(seq_id=1, prompt_len=9, max_new_tokens=5, hash_ids=[1, 2, 7])
    s.add_sequence(seq_id=2, prompt_len=8, max_new_tokens=5, hash_ids=[1, 2])
    s.add_sequence(seq_id=3, prompt_len=8, max_new_tokens=5, hash_ids=[9, 2])
    p1 = s.schedule()
    # B shares blocks 0-1 and computes its 9th token; C's whole prompt is cached, so its
    # last block is computed again, in a block of its own, to produce logits; D's first
    # hash differs: no sharing.
    assert rows(p1) == [(1, 1, 9), (2, 4, 8), (3, 8, 8)]
    assert list(s.seq(1).blocks[:2]) == a_blocks[:2]
    assert list(s.seq(2).blocks[:1]) == a_blocks[:1] and s.seq(2).blocks[1] not in a_blocks
    assert s.refcount(a_blocks[0]) == 3 and s.refcount(a_blocks[1]) == 2
    assert [s.seq(i).prefix_hit_tokens for i in (1, 2, 3)] == [8, 4, 0]
    assert (s.seq(1).num_cached, s.seq(1).num_inflight) == (8, 1)
    s.postprocess(p1)
    while not s.is_finished():
        run_step(s)
    assert s.num_free_blocks() == 1024 and s.refcount(a_blocks[0]) == 0


def test_prefix_index_retains_freed_blocks(impl):
    s = make_scheduler(impl, block_size=4, engine_type="prompt")
    s.add_sequence(seq_id=0, prompt_len=8, max_new_tokens=1, hash_ids=[1, 2])
    run_step(s)  # handed off: its blocks are free, and retained in the index
    s.add_sequence(seq_id=1, prompt_len=8, max_new_tokens=1, hash_ids=[1, 2])
    assert rows(s.schedule()) == [(1, 4, 8)] and s.seq(1).prefix_hit_tokens == 4


def test_prefix_caching_off_shares_nothing(impl):
    s = make_scheduler(impl, block_size=4, prefix_caching=False)
    s.add_sequence(seq_id=0, prompt_len=8, max_new_tokens=1, hash_ids=[1, 2])
    s.add_sequence(seq_id=1, prompt_len=8, max_new_tokens=4, hash_ids=[1, 2])
    run_step(s)
    s.add_sequence(seq_id=2, prompt_len=8, max_new_tokens=1, hash_ids=[1, 2])
    assert rows(s.schedule()) == [(2, 8, 8)] and s.seq(2).prefix_hit_tokens == 0


def test_phase_agreed_by_a_cross_process_vote(impl):
    # One DP rank per process: each reports has_prompt_work(), an all-reduce decides, and
    # every process schedules the agreed phase.
    s = make_scheduler(impl)
    (a,) = make_requests(s, (6, 4))
    assert s.has_prompt_work()
    p0, _ = run_step(s, phase="decode")  # the vote went to decode: nothing to decode here
    assert p0.phase == "decode" and p0.batches[0].empty
    p1, _ = run_step(s)
    assert p1.phase == "prompt" and rows(p1) == [(a, 6, 6)]
    assert not s.has_prompt_work()
    p2, _ = run_step(s)
    p3 = s.schedule(phase="prompt")  # another rank prefills: this one runs an empty prompt step
    assert p3.phase == "prompt" and p3.batches[0].empty


def test_mixed_round_decodes_that_do_not_fit_the_budget_wait(impl):
    # 9.15: q = 3 (two drafts), budget 7. Two decode rows cost 6; the third sequence waits,
    # running and unpreempted, and the last token of budget goes to a new prompt's chunk.
    s = make_scheduler(impl, mixed_batches=True, max_num_batched_tokens=7, num_mtp=2)
    x, y, z = make_requests(s, (1, 10), (1, 10), (1, 10))
    p0, _ = run_step(s)
    assert rows(p0) == [(x, 1, 1), (y, 1, 1), (z, 1, 1)]
    (w,) = make_requests(s, (8, 2), start_id=3)
    p1, _ = run_step(s, accepted=[0, 0, 0])
    # equal outputs: tried from the right, z then y; x waits; w gets a chunk of 1
    assert rows(p1) == [(z, 3, 4), (y, 3, 4), (w, 1, 1)]
    assert p1.batches[0].kind.tolist() == [KIND_DECODE, KIND_DECODE, KIND_CHUNK]
    assert p1.batches[0].padded_q.sum() == 7 and p1.preempted.tolist() == []
    assert (s.seq(x).status, s.seq(x).num_inflight, s.seq(x).output_len) == ("running", 0, 1)
    # x (output 1) is now the shortest: tried first under longest_output; y waits
    p2, _ = run_step(s)
    assert rows(p2) == [(x, 3, 4), (z, 3, 5), (w, 1, 2)]
    assert p2.phase == "prompt"


def test_mixed_round_without_prefill_is_a_decode_step(impl):
    # 9.15: no vote, and the phase says whether any prefill token was scheduled.
    s = make_scheduler(impl, mixed_batches=True, max_num_batched_tokens=2)
    a, b, c = make_requests(s, (1, 3), (1, 3), (1, 3))
    p0, _ = run_step(s)
    assert rows(p0) == [(a, 1, 1), (b, 1, 1)] and p0.phase == "prompt"  # c: no budget
    p1, _ = run_step(s)
    # a and b decode first and take the whole budget: c's prefill waits, a decode step
    assert rows(p1) == [(b, 1, 2), (a, 1, 2)] and p1.phase == "decode"
    assert s.seq(c).status == "waiting"
