"""The design's worked examples (docs/scheduling.md), verbatim, on both schedulers."""

import pytest

from engine import KIND_NAMES
from tests.helpers import IMPLS, make_requests, make_scheduler, rows

pytestmark = pytest.mark.core

A, B = 0, 1


def counters(sched, *ids):
    return [(sched.seq(i).num_tokens, sched.seq(i).num_cached) for i in ids]


@pytest.mark.parametrize("impl", IMPLS)
def test_baseline_two_prompts_then_decode(impl):
    # Section 3: no MTP, no overlap, one DP rank, cp_size 1, KV ample, budget 16.
    s = make_scheduler(impl)
    make_requests(s, (6, 10), (3, 10))  # A: 6-token prompt, B: 3-token prompt

    step0 = s.schedule()
    assert step0.phase == "prompt"
    assert rows(step0) == [(A, 6, 6), (B, 3, 3)]
    s.postprocess(step0)
    assert counters(s, A, B) == [(7, 6), (4, 3)]  # one token sampled each

    step1 = s.schedule()
    assert step1.phase == "decode"
    assert rows(step1) == [(B, 1, 4), (A, 1, 7)]  # the decode batch of step 1 is [B, A]
    s.postprocess(step1)
    assert counters(s, A, B) == [(8, 7), (5, 4)]


@pytest.mark.parametrize("impl", IMPLS)
def test_overlap_sees_previous_step_as_inflight(impl):
    # Section 7: at step 1, A has num_cached 0, num_inflight 6, seqlen_q 1, so seqlen_k = 7,
    # the same as without overlap.
    s = make_scheduler(impl, overlap=True)
    make_requests(s, (6, 10), (3, 10))
    step0 = s.schedule()  # schedule(0); forward(0) is launched
    assert (s.seq(A).num_cached, s.seq(A).num_inflight) == (0, 6)
    step1 = s.schedule()  # schedule(1) before postprocess(0)
    assert step1.phase == "decode"
    assert rows(step1) == [(B, 1, 4), (A, 1, 7)]
    s.postprocess(step0)
    s.postprocess(step1)
    assert counters(s, A, B) == [(8, 7), (5, 4)]  # as in the baseline


def _outputs_2_7_5(impl, preempt_order):
    """Three running sequences X, Y, Z with output lengths [2, 7, 5] and no free block.

    MTP acceptance makes the outputs diverge while the add order stays X, Y, Z:
    block_size 1, prompts of 1 token, q = 6, lookahead 6 -> 7 blocks each after prefill.
    """
    s = make_scheduler(impl, num_mtp=5, block_size=1, num_kv_blocks=21,
                       preempt_order=preempt_order)
    x, y, z = make_requests(s, (1, 20), (1, 20), (1, 20))
    s.postprocess(s.schedule())  # prompt round: each samples its first token
    step1 = s.schedule()
    assert rows(step1) == [(z, 6, 7), (y, 6, 7), (x, 6, 7)]
    s.postprocess(step1, accepted=[3, 5, 0])  # rows z, y, x
    assert [s.seq(i).output_len for i in (x, y, z)] == [2, 7, 5]
    assert s.num_free_blocks() == 0
    return s, (x, y, z)


@pytest.mark.parametrize("impl", IMPLS)
def test_victim_order_longest_output(impl):
    # Section 5: [2, 7, 5] sorts to [7, 5, 2]; the sequence with 2 is tried first; capacity
    # runs short, so the victim is the one with 7.
    s, (x, y, z) = _outputs_2_7_5(impl, "longest_output")
    step2 = s.schedule()
    assert step2.preempted.tolist() == [y]
    assert step2.batches[0].seq_ids.tolist() == [x, z]  # in the order they were accepted
    assert s.seq(y).status == "waiting" and len(s.seq(y).blocks) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_victim_order_shortest_output(impl):
    # Section 9.5, the mirror: ascending [2, 5, 7]; the 7 is tried first, victims from the left.
    s, (x, y, z) = _outputs_2_7_5(impl, "shortest_output")
    step2 = s.schedule()
    assert step2.batches[0].seq_ids.tolist() == [y]
    assert step2.preempted.tolist() == [x, z]
    assert step2.batches[0].num_waiting == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_kv_in_transfer_reserves_then_decodes(impl):
    # "KV in transfer": completion engine, one rank, block_size 4, 5 KV blocks, no MTP, no
    # overlap (lookahead 1). A arrives prefilled; R and C arrive with their KV in transfer.
    s = make_scheduler(impl, engine_type="completion", block_size=4, num_kv_blocks=5)
    a, r, c = 0, 1, 2
    s.add_sequence(seq_id=a, prompt_len=6, max_new_tokens=3)
    s.add_sequence(seq_id=r, prompt_len=8, max_new_tokens=2, kv_transfer=True)
    s.add_sequence(seq_id=c, prompt_len=3, max_new_tokens=2, kv_transfer=True)

    step0 = s.schedule()  # A (2 blocks) and R (3) admitted; C needs 1, none free: waits
    assert rows(step0) == [(a, 1, 7)]
    assert [len(s.seq(i).blocks) for i in (a, r, c)] == [2, 3, 0]
    assert (s.seq(r).status, s.seq(r).kv_pending) == ("running", True)
    assert (s.seq(c).status, s.seq(c).kv_pending) == ("waiting", True)
    b = step0.batches[0]
    assert (b.kv_blocks_free, b.num_running, b.num_waiting) == (0, 2, 1)
    s.postprocess(step0)
    assert s.seq(a).output_len == 2

    s.kv_arrived(r)
    step1 = s.schedule()  # C still waits
    assert rows(step1) == [(r, 1, 9), (a, 1, 8)]
    assert step1.batches[0].kv_blocks_free == 0 and s.seq(c).status == "waiting"
    assert sorted(s.postprocess(step1).finished.tolist()) == [a, r]
    assert s.num_free_blocks() == 5

    step2 = s.schedule()  # C admitted (1 block): its reservation, nothing to decode
    assert step2.batches[0].empty and step2.batches[0].kv_blocks_free == 4
    assert (s.seq(c).status, len(s.seq(c).blocks)) == ("running", 1)
    s.postprocess(step2)

    s.kv_arrived(c)
    step3 = s.schedule()
    assert rows(step3) == [(c, 1, 4)] and step3.batches[0].kv_blocks_free == 4
    assert s.postprocess(step3).finished.tolist() == [c]
    assert s.num_free_blocks() == 5 and s.is_finished()


def mixed_rows(plan):
    """(seq_id, kind, seqlen_q, seqlen_k) per row of rank 0, in batch order."""
    b = plan.batches[0]
    return [(i, KIND_NAMES[k], q, kk) for i, k, q, kk in
            zip(b.seq_ids.tolist(), b.kind.tolist(), b.seqlen_q.tolist(), b.seqlen_k.tolist())]


@pytest.mark.parametrize("impl", IMPLS)
def test_mixed_batches_decode_rows_then_chunks_under_the_budget(impl):
    # "Mixed batches" (9.15): one rank, no MTP, no overlap, KV ample, token budget 4.
    # A (prompt 6, M 3) and B (prompt 5, M 3) arrive before step 0, C (prompt 3, M 2)
    # before step 2.
    s = make_scheduler(impl, mixed_batches=True, max_num_batched_tokens=4)
    a, b, c = 0, 1, 2
    s.add_sequence(seq_id=a, prompt_len=6, max_new_tokens=3)
    s.add_sequence(seq_id=b, prompt_len=5, max_new_tokens=3)
    steps = [
        ("prompt", [(a, "chunk", 4, 4)]),  # B waits: no budget left
        ("prompt", [(a, "final", 2, 6), (b, "chunk", 2, 2)]),
        ("prompt", [(a, "decode", 1, 7), (b, "final", 3, 5)]),  # C waits
        ("prompt", [(b, "decode", 1, 6), (a, "decode", 1, 8), (c, "chunk", 2, 2)]),
        ("prompt", [(b, "decode", 1, 7), (c, "final", 1, 3)]),  # budget left 2
        ("decode", [(c, "decode", 1, 4)]),  # budget left 3
    ]
    finished = []
    for step, (phase, want) in enumerate(steps):
        if step == 2:
            s.add_sequence(seq_id=c, prompt_len=3, max_new_tokens=2)
        plan = s.schedule()
        assert (plan.phase, mixed_rows(plan)) == (phase, want), f"step {step}"
        finished.append(s.postprocess(plan).finished.tolist())
        if step == 1:
            assert s.seq(a).output_len == 1
        if step == 2:
            assert (s.seq(a).output_len, s.seq(b).output_len) == (2, 1)
            assert s.seq(c).status == "waiting"
    assert finished == [[], [], [], [a], [b], [c]]
    assert s.is_finished()
