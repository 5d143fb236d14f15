"""Prefix caching on both schedulers, hand-computed (docs/scheduling.md, "Prefix caching"):
blocks retained after their owners finish, the eviction order, a trace's hash block size
against the engine's block size, and each round's hit, eviction and retention counts."""

import pytest

from tests.helpers import IMPLS, make_scheduler, rows

pytestmark = [pytest.mark.parametrize("impl", IMPLS), pytest.mark.core]


def drain(s):
    while not s.is_finished():
        s.postprocess(s.schedule())


def admit(s, seq_id, prompt_len, hash_ids, max_new_tokens=1, hash_block_size=None):
    """Add one sequence and run the prompt round that admits it; the plan."""
    s.add_sequence(seq_id=seq_id, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
                   hash_ids=hash_ids, hash_block_size=hash_block_size)
    plan = s.schedule()
    s.postprocess(plan)
    return plan


def test_later_turns_of_a_conversation_hit_finished_turns(impl):
    # Each turn's prompt is the previous turn's prompt and answer plus a new message; its
    # hash ids extend the previous turn's up to the last block they have in common.
    s = make_scheduler(impl, block_size=4)
    turns = [(10, [1, 2, 3]), (20, [1, 2, 4, 5, 6]), (30, [1, 2, 4, 5, 6, 7, 8, 9])]
    hits = []
    for seq_id, (prompt_len, hash_ids) in enumerate(turns):
        plan = admit(s, seq_id, prompt_len, hash_ids, max_new_tokens=3)
        hits.append(plan.batches[0].num_hit_tokens)
        drain(s)  # the turn finishes before the next one arrives
        assert s.seq(seq_id).status == "finished" and not list(s.seq(seq_id).blocks)
    # Turn 2 shares turn 1's two full blocks; turn 3 all five of turn 2's.
    assert hits == [0, 8, 20]
    assert [s.seq(i).prefix_hit_tokens for i in range(3)] == [0, 8, 20]
    assert s.num_free_blocks() == 1024


def test_retained_blocks_are_evicted_least_recently_used_first(impl):
    s = make_scheduler(impl, block_size=4, num_kv_blocks=6, engine_type="prompt")
    admit(s, 0, 12, [1, 2, 3])  # A: blocks 0 1 2, handed off: retained 2 1 0 (last block first)
    admit(s, 1, 8, [7, 8])  # B: blocks 3 4 from the never-indexed 3 4 5; retained 2 1 0 4 3
    assert list(s.seq(1).blocks) == [] and s.num_free_blocks() == 6
    f = admit(s, 2, 8, [1, 99])  # F hits A's block 0 and takes 5: retained 2 1 4 3 5 0
    assert rows(f) == [(2, 4, 8)] and f.batches[0].num_retained_blocks == 4
    c = admit(s, 3, 16, [20, 21, 22, 23])  # C evicts the four oldest: 2 1 4 3
    b = c.batches[0]
    assert rows(c) == [(3, 16, 16)]
    assert b.block_tables.tolist() == [[2, 1, 4, 3]]
    assert (b.num_hit_tokens, b.num_evicted_blocks, b.num_retained_blocks) == (0, 4, 2)
    # Retained now 5 0 3 4 1 2. D = A's prompt: block 0 (its first) survived, its second did
    # not; its two new blocks evict 5 and 3 (0 is shared, so out of the list).
    d = admit(s, 4, 12, [1, 2, 3])
    b = d.batches[0]
    assert rows(d) == [(4, 8, 12)] and b.block_tables.tolist() == [[0, 5, 3]]
    assert (b.num_hit_tokens, b.num_evicted_blocks, b.num_retained_blocks) == (4, 2, 3)
    e = admit(s, 5, 8, [7, 8])  # B's blocks are gone
    assert rows(e) == [(5, 8, 8)] and e.batches[0].num_hit_tokens == 0


def test_a_retained_hit_counts_against_the_free_blocks(impl):
    # A leaves blocks 0 1 retained; X (no hash ids) takes the never-used 2 3. B would share
    # A's block 0 and needs 2 more: 2 are free, but sharing block 0 takes one of them, so B
    # waits for X.
    s = make_scheduler(impl, block_size=4, num_kv_blocks=4, engine_type="prompt")
    admit(s, 0, 8, [1, 2])
    s.add_sequence(seq_id=1, prompt_len=8, max_new_tokens=1)
    s.add_sequence(seq_id=2, prompt_len=12, max_new_tokens=1, hash_ids=[1, 5, 6])
    first = s.schedule()
    assert rows(first) == [(1, 8, 8)] and s.num_free_blocks() == 2
    s.postprocess(first)
    second = s.schedule()
    assert rows(second) == [(2, 8, 12)] and second.batches[0].num_hit_tokens == 4


def test_hash_blocks_split_into_engine_blocks(impl):
    # A hash id of 8 tokens stands for two 4-token engine blocks.
    s = make_scheduler(impl, block_size=4)
    admit(s, 0, 16, [1, 2], hash_block_size=8)
    drain(s)
    b = admit(s, 1, 14, [1, 3], hash_block_size=8)  # shares the first hash block: 8 tokens
    c = admit(s, 2, 16, [1, 2], hash_block_size=8)  # all of A's, less the last engine block
    assert rows(b) == [(1, 6, 14)] and rows(c) == [(2, 4, 16)]


def test_hash_blocks_combine_into_engine_blocks(impl):
    # Two 4-token hash ids make one 8-token engine block.
    s = make_scheduler(impl, block_size=8)
    admit(s, 0, 16, [1, 2, 3, 4], hash_block_size=4)
    drain(s)
    plans = [admit(s, 1, 16, [1, 2, 3, 5], hash_block_size=4),  # first engine block only
             admit(s, 2, 12, [1, 2, 9], hash_block_size=4),  # its one full block
             admit(s, 3, 16, [1, 7, 3, 4], hash_block_size=4)]  # differs inside the first
    assert [p.batches[0].num_hit_tokens for p in plans] == [8, 8, 0]


def test_hash_block_size_neither_dividing_nor_divided_is_refused(impl):
    s = make_scheduler(impl, block_size=16)
    with pytest.raises(ValueError, match="hash block size 24 and block_size 16: one must divide the other"):
        s.add_sequence(seq_id=0, prompt_len=48, max_new_tokens=1, hash_ids=[1], hash_block_size=24)
    with pytest.raises(ValueError, match="hash_ids has 3 entries; a 64-token prompt has at most 2 blocks of 32"):
        s.add_sequence(seq_id=0, prompt_len=64, max_new_tokens=1, hash_ids=[1, 2, 3],
                       hash_block_size=32)
    with pytest.raises(ValueError, match="hash_block_size must be >= 1, got 0"):
        s.add_sequence(seq_id=0, prompt_len=64, max_new_tokens=1, hash_block_size=0)
    assert s.schedule().batches[0].empty  # nothing was added
