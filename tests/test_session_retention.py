"""Session retention on both schedulers, hand-computed (docs/scheduling.md, "Prefix
caching"): a waiting session's retained blocks are evicted after every other retained block,
until its session ends; they never keep a sequence from being admitted."""

import pytest

from tests.helpers import IMPLS, make_scheduler, rows

pytestmark = [pytest.mark.parametrize("impl", IMPLS), pytest.mark.core]


def admit(s, seq_id, prompt_len, hash_ids, session_id=-1):
    """Add one prompt-engine sequence and run the round that admits (and hands off) it."""
    s.add_sequence(seq_id=seq_id, prompt_len=prompt_len, max_new_tokens=1, hash_ids=hash_ids,
                   session_id=session_id)
    plan = s.schedule()
    s.postprocess(plan)
    return plan


def gap_traffic(s):
    """A session's first turn A (blocks 0 1 2), then, in its gap, traffic of no session: X
    (blocks 3 4, retained after A's) and Y, which needs three blocks with one never used."""
    admit(s, 0, 12, [1, 2, 3], session_id=7)
    admit(s, 1, 8, [4, 5])
    return admit(s, 2, 12, [20, 21, 22])


@pytest.mark.parametrize("retention", [False, True])
def test_a_waiting_sessions_blocks_outlive_other_traffic(impl, retention):
    s = make_scheduler(impl, block_size=4, num_kv_blocks=6, engine_type="prompt",
                       session_retention=retention)
    y = gap_traffic(s)
    # Y takes block 5, then the two oldest retained: A's 2 1 (A's later blocks go first)
    # without retention; X's 4 3 with it, A's being held.
    assert y.batches[0].block_tables.tolist() == [[5, 4, 3] if retention else [5, 2, 1]]
    assert y.batches[0].num_evicted_blocks == 2
    second = admit(s, 3, 16, [1, 2, 3, 9], session_id=7)  # A's context and a new block
    hit = 12 if retention else 4
    assert rows(second) == [(3, 16 - hit, 16)] and second.batches[0].num_hit_tokens == hit


def test_held_blocks_never_keep_a_sequence_out(impl):
    # All six blocks are A's or Y's, A's held: Z, needing all six, is admitted at once.
    s = make_scheduler(impl, block_size=4, num_kv_blocks=6, engine_type="prompt",
                       session_retention=True, max_num_batched_tokens=32)
    admit(s, 0, 12, [1, 2, 3], session_id=7)
    admit(s, 1, 12, [20, 21, 22])
    z = admit(s, 2, 24, [30, 31, 32, 33, 34, 35])
    assert rows(z) == [(2, 24, 24)] and z.batches[0].num_evicted_blocks == 6
    assert z.batches[0].block_tables.tolist() == [[5, 4, 3, 2, 1, 0]]  # Y's, then A's


def test_an_ended_sessions_blocks_are_plain_retained_ones(impl):
    # Session 7's A is released before session 8's B; once session 7 ends, A's blocks are
    # the newest plain ones, yet still evicted before B's, which are held.
    s = make_scheduler(impl, block_size=4, num_kv_blocks=6, engine_type="prompt",
                       session_retention=True)
    admit(s, 0, 8, [1, 2], session_id=7)  # blocks 0 1
    admit(s, 1, 8, [3, 4], session_id=8)  # blocks 2 3
    s.end_session(7)
    c = admit(s, 2, 16, [20, 21, 22, 23])  # 4 5 never used, then A's 1 0
    assert c.batches[0].block_tables.tolist() == [[4, 5, 1, 0]]
    # A later turn of the ended session is not held either: D takes C's oldest 0 1, and E
    # evicts C's other two and D's before B's.
    admit(s, 3, 8, [1, 2], session_id=7)
    e = admit(s, 4, 16, [40, 41, 42, 43])
    assert e.batches[0].block_tables.tolist() == [[5, 4, 1, 0]]


def test_end_session_without_retention_changes_nothing(impl):
    plans = []
    for end in (False, True):
        s = make_scheduler(impl, block_size=4, num_kv_blocks=6, engine_type="prompt")
        admit(s, 0, 12, [1, 2, 3], session_id=7)
        if end:
            s.end_session(7)
        admit(s, 1, 8, [4, 5])
        plans.append(admit(s, 2, 12, [20, 21, 22]).batches[0].block_tables.tolist())
    assert plans[0] == plans[1] == [[5, 2, 1]]

