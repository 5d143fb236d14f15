"""Scheduler(config, retain_finished=False): sequences that leave (finished, handed off,
rejected) are released and their slots reused, once no outstanding plan can name them;
retain_finished=True (the default) keeps them all. Also: recycled plans never touch a plan
that Python still holds."""

import numpy as np
import pytest

from engine import EngineConfig, LLMEngine, Scheduler, SchedulerConfig
from engine._core import SequenceLeft
from tests.helpers import BASE, prefix_hash_ids
from tests.invariants import check_invariants

pytestmark = pytest.mark.core

ROUNDS = 700


def random_run(retain_finished, seed, check=True, **overrides):
    """A long run with arrivals along the way (some rejected, some sharing prefixes),
    overlap on; with `check`, invariants over the sequences the scheduler still holds
    after every call. Yields (scheduler, plan) after each schedule()."""
    rng = np.random.default_rng(seed)
    cfg = SchedulerConfig(**{**BASE, "num_kv_blocks": 64, "max_num_batched_tokens": 64,
                             "max_num_seqs": 8, "overlap": True, **overrides})
    sched = Scheduler(cfg, retain_finished=retain_finished)
    added, held, inflight = 0, [], None
    for _ in range(ROUNDS):
        if rng.random() < 0.3:
            prompt_len = int(rng.integers(1, 200)) if rng.random() < 0.9 else 2000  # rejected
            sched.add_sequence(seq_id=added, prompt_len=prompt_len,
                               max_new_tokens=int(rng.integers(1, 30)),
                               hash_ids=prefix_hash_ids(rng, prompt_len, cfg.block_size))
            held.append(added)
            added += 1
        plan = sched.schedule()
        if check:
            check_invariants(sched, cfg, held, plan)
        if inflight is not None:
            sched.postprocess(inflight)
            held = [i for i in held if still_held(sched, i)]
            if check:
                check_invariants(sched, cfg, held)
        inflight = plan
        yield sched, plan


def still_held(sched, seq_id):
    if sched.retain_finished and sched.seq(seq_id).status in ("finished", "rejected"):
        return False  # kept, but done: nothing more to check
    try:
        sched.seq(seq_id)
    except KeyError:
        return False
    return True


def plan_rows(plan):
    return [(b.seq_ids.tolist(), b.seqlen_q.tolist(), b.seqlen_k.tolist(), b.kind.tolist(),
             b.block_tables.tolist(), b.kv_blocks_free, b.num_waiting, b.num_running)
            for b in plan.batches] + [plan.phase, plan.preempted.tolist(), plan.rejected.tolist()]


@pytest.mark.parametrize("seed", [0, 1])
def test_releasing_sequences_changes_no_plan(seed):
    kept = random_run(True, seed, check=False, dp_size=2, dp_assign="least_loaded")
    released = random_run(False, seed, dp_size=2, dp_assign="least_loaded")
    for (_, a), (_, b) in zip(kept, released):
        assert plan_rows(a) == plan_rows(b), f"step {a.step}"


def test_slots_stay_bounded_by_what_is_live():
    most_live = 0
    for sched, _ in random_run(False, seed=2):
        most_live = max(most_live, sched.num_live)
    # ~200 requests went through; slots: the most ever live, plus those that left within
    # the two plans still outstanding.
    assert sched.num_slots <= most_live + 2 * 8
    assert sched.num_slots < 60


def test_retained_sequences_keep_one_slot_each():
    *_, (sched, _) = random_run(True, seed=2, check=False)  # run it to the end
    assert sched.num_slots == sched.num_live > 150
    assert sched.retain_finished


def test_a_left_sequence_raises_key_error_and_its_id_can_return():
    cfg = SchedulerConfig(**BASE)
    sched = Scheduler(cfg, retain_finished=False)
    sched.add_sequence(seq_id=7, prompt_len=6, max_new_tokens=1)
    sched.add_sequence(seq_id=8, prompt_len=100_000, max_new_tokens=1)  # rejected
    first = sched.schedule()
    assert first.rejected.tolist() == [8]
    assert sched.seq(8).status == "rejected"  # held until the plan reporting it is done
    assert sched.postprocess(first).finished.tolist() == [7]
    with pytest.raises(KeyError, match="sequence 7 has left the scheduler"):
        sched.seq(7)
    with pytest.raises(SequenceLeft):
        sched.seq(8)
    assert sched.num_live == 0 and sched.num_free_blocks() == cfg.num_kv_blocks
    sched.add_sequence(seq_id=7, prompt_len=3, max_new_tokens=2)  # a new request
    assert sched.seq(7).prompt_len == 3 and sched.num_slots == 2


def test_a_retained_unknown_id_stays_a_value_error():
    sched = Scheduler(SchedulerConfig(**BASE))
    with pytest.raises(ValueError, match="unknown seq_id 3"):
        sched.seq(3)


def test_a_finished_sequence_stays_while_a_plan_in_flight_names_it():
    sched = Scheduler(SchedulerConfig(**{**BASE, "overlap": True}), retain_finished=False)
    sched.add_sequence(seq_id=0, prompt_len=6, max_new_tokens=2)
    p0 = sched.schedule()
    p1 = sched.schedule()  # decodes 0 while p0 is in flight
    p2 = sched.schedule()  # nothing: 0's last token is in flight
    sched.postprocess(p0)
    assert sched.postprocess(p1).finished.tolist() == [0]
    assert sched.seq(0).status == "finished"  # p2 is outstanding
    sched.postprocess(p2)
    with pytest.raises(KeyError):
        sched.seq(0)


def test_a_plan_python_holds_is_never_recycled():
    sched = Scheduler(SchedulerConfig(**BASE))
    sched.add_sequence(seq_id=0, prompt_len=6, max_new_tokens=100)
    sched.add_sequence(seq_id=1, prompt_len=40, max_new_tokens=100)
    sched.postprocess(sched.schedule())
    plan = sched.schedule()
    tables, seqlen_k = plan.batches[0].block_tables, plan.batches[0].seqlen_k
    before = (tables.tolist(), seqlen_k.tolist())
    sched.postprocess(plan)
    del plan  # the views alone keep it alive
    for _ in range(20):
        sched.postprocess(sched.schedule())
    assert (tables.tolist(), seqlen_k.tolist()) == before


@pytest.mark.parametrize("overlap", [False, True])
def test_the_engine_drops_requests_the_scheduler_has_released(overlap):
    """The torch executor knows each request's rank: finishing and rejecting ask nothing
    of the scheduler, which (built by LLMEngine with retain_finished=False) no longer
    holds them."""
    sched_cfg = SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8, num_kv_blocks=64,
                                block_size=16, dp_size=2, overlap=overlap)
    engine = LLMEngine(EngineConfig(scheduler=sched_cfg, model="tiny", device="cpu"))
    for i in range(12):
        engine.add_request(i, prompt_len=int(5 + 3 * i), max_new_tokens=3)
    engine.add_request(12, prompt_len=5000, max_new_tokens=3)  # rejected: never added there
    engine.run()
    engine.close()
    assert engine.scheduler.num_live == 0
    assert all(not w.tokens for w in engine.executor.workers)
