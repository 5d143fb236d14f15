"""DP ranks in separate processes over torch.distributed (gloo on the CPU)."""

from engine import EngineConfig, SchedulerConfig
from engine.dp import run_dp


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


def records_as_they_are(records):
    return [(r.phase, r.sched_cpp_ns, r.forward_ns) for r in records] * 200  # a large summary


def test_large_results_come_back():
    config = EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=64), model="tiny", device="cpu")
    requests = [dict(request_id=i, prompt_len=6, max_new_tokens=20) for i in range(4)]
    per_rank = run_dp(config, 2, requests, records_as_they_are)
    assert all(len(r) >= 20 * 200 for r in per_rank)
