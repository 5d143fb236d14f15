"""DP ranks in separate processes over torch.distributed (gloo on the CPU)."""

import pytest

from engine import EngineConfig, SchedulerConfig
from engine.dp import run_dp

pytestmark = [pytest.mark.slow, pytest.mark.core]


def phases_and_rows(records):
    return [(r.phase, sum(len(b.seq_ids) for b in r.batches)) for r in records], \
        sorted(int(i) for r in records for i in r.finished)


def test_two_ranks_vote_and_the_idle_rank_runs_empty_steps():
    config = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=64, num_kv_blocks=128),
                          model="tiny", device="cpu")
    # Round robin by id: even ids go to rank 0, so rank 1 has nothing to do at all.
    requests = [dict(request_id=i, prompt_len=8 + i, max_new_tokens=3) for i in (0, 2, 4)]
    (steps0, done0), (steps1, done1) = run_dp(config, 2, requests, phases_and_rows)
    assert done0 == [0, 2, 4] and done1 == []
    assert [p for p, _ in steps0] == [p for p, _ in steps1]  # one vote, the same phase
    assert steps0[0] == ("prompt", 3) and steps1[0] == ("prompt", 0)  # an empty prompt step
    assert all(rows == 0 for _, rows in steps1)
    assert ("decode", 0) in steps1  # and empty decode steps while rank 0 decodes


def test_mixed_batches_hold_no_vote():
    """9.15: each rank runs its own mixed round; the idle one steps along, empty."""
    config = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=64, num_kv_blocks=128,
                                                    mixed_batches=True),
                          model="tiny", device="cpu")
    requests = [dict(request_id=i, prompt_len=8 + i, max_new_tokens=3) for i in (0, 2, 4)]
    (steps0, done0), (steps1, done1) = run_dp(config, 2, requests, phases_and_rows)
    assert done0 == [0, 2, 4] and done1 == []
    assert len(steps0) == len(steps1) and steps0[0] == ("prompt", 3)
    assert all(step == ("decode", 0) for step in steps1)  # its own phase: nothing prefilled


def records_as_they_are(records):
    return [(r.phase, r.sched_cpp_ns, r.forward_ns) for r in records] * 200  # a large summary


def test_large_results_come_back():
    config = EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=64), model="tiny", device="cpu")
    requests = [dict(request_id=i, prompt_len=6, max_new_tokens=20) for i in range(4)]
    per_rank = run_dp(config, 2, requests, records_as_they_are)
    assert all(len(r) >= 20 * 200 for r in per_rank)


def hit_tokens(records):
    return sum(int(b.num_hit_tokens) for r in records for b in r.batches)


def test_hash_ids_reach_each_rank():
    # Round robin by id. A 16-token prompt fills the budget, so each rank's second request
    # is admitted after its first one's prompt is committed. Hash ids name 8-token blocks
    # (two engine blocks each): rank 0's second request shares the first hash block (8
    # tokens); rank 1's repeats its first request's whole prompt (12 tokens: all but the
    # last block).
    config = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=16, block_size=4,
                                                    num_kv_blocks=64),
                          model="tiny", device="cpu")
    ids = {0: [1, 2], 1: [5, 6], 2: [1, 3], 3: [5, 6]}
    requests = [dict(request_id=i, prompt_len=16, max_new_tokens=2, hash_ids=ids[i],
                     hash_block_size=8) for i in range(4)]
    assert run_dp(config, 2, requests, hit_tokens) == [8, 12]
