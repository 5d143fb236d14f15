"""CostModel (C++) against FlopsEstimator.calc_flops, its reference, on batches a real
scheduler made.

Tolerance: relative 1e-12. Both sides sum the same integer terms; the C++ sums them as
int64 and folds the geometry into one coefficient per term, so the totals differ only by
the rounding of a few float64 multiply-adds (about 2e-16 measured).
"""

import dataclasses

import numpy as np
import pytest

from engine import (
    KIND_CHUNK,
    KIND_DECODE,
    KIND_FINAL,
    FlopsEstimator,
    Scheduler,
    SchedulerConfig,
    _core,
)
from engine.model_config import load_model_config
from tests.test_flops import V3, V4F, V32

pytestmark = pytest.mark.core

REL = 1e-12
MODELS = [load_model_config("tiny"), V3, V32, V4F]
NUM_SCENARIOS = 12
BLOCK_SIZE = 64


def random_scheduler(rng):
    """A scheduler over a random config and requests: CP padding, MTP drafts, chunked
    prefills, DP ranks (an idle rank's batch is empty), prompts up to 100k tokens."""
    cp_size = int(rng.integers(1, 4))
    budget = int(rng.choice([4096, 16384, 32768]))
    n = int(rng.integers(2, 12))
    prompts = np.where(rng.random(n) < 0.25, rng.integers(20_000, 100_001, n),
                       rng.integers(1, 2000, n))
    max_new = rng.integers(1, 10, len(prompts))
    cfg = SchedulerConfig(
        max_num_batched_tokens=budget, max_num_seqs=int(rng.integers(1, 17)),
        num_kv_blocks=int(sum(-(-(p + m + 8) // BLOCK_SIZE) for p, m in zip(prompts, max_new))),
        block_size=BLOCK_SIZE, cp_size=cp_size, dp_size=int(rng.integers(1, 3)),
        num_mtp=int(rng.integers(0, 3)),
        max_prefill_chunk=None if rng.random() < 0.5 else int(rng.integers(2 * cp_size, budget + 1)))
    sched = Scheduler(cfg)
    for i, (p, m) in enumerate(zip(prompts, max_new)):
        sched.add_sequence(seq_id=i, prompt_len=int(p), max_new_tokens=int(m))
    return sched


@pytest.fixture(scope="module")
def batches():
    """(where, batch, accepted) for every batch of every scenario; accepted is random per
    decode row (0..q-1), or None for a fifth of the batches."""
    out = []
    for seed in range(NUM_SCENARIOS):
        rng = np.random.default_rng(seed)
        sched = random_scheduler(rng)
        for _ in range(400):
            if sched.is_finished():
                break
            plan = sched.schedule()
            accepted = [np.where(b.kind == KIND_DECODE, rng.integers(0, np.maximum(b.seqlen_q, 1)),
                                 0).astype(np.int64) for b in plan.batches]
            for b, a in zip(plan.batches, accepted):
                out.append((f"seed {seed} step {plan.step} rank {b.rank}", b,
                            a if rng.random() < 0.8 else None))
            sched.postprocess(plan, accepted)
        assert sched.is_finished(), f"seed {seed}: scenario did not finish"
    return out


def mismatches(estimator, cost_model, batches, mtp):
    """Batches where cost_model.batch differs from calc_flops beyond REL."""
    bad = []
    for where, b, accepted in batches:
        f = estimator.calc_flops(b.seqlen_q, b.seqlen_k, kind=b.kind, padded_q=b.padded_q,
                                 accepted=accepted, mtp_q=b.seqlen_q if mtp else None)
        want = (f.model_flops, f.executed_flops, f.bytes)
        cost = cost_model.batch(b, accepted, mtp)
        got = (cost.model_flops, cost.executed_flops, cost.bytes)
        if not np.allclose(got, want, rtol=REL, atol=0):
            bad.append((where, got, want))
    return bad


def test_scenarios_reach_every_case(batches):
    rows = [(b, a) for _, b, a in batches]
    q = np.concatenate([b.seqlen_q for b, _ in rows])
    kind = np.concatenate([b.kind for b, _ in rows])
    padded = np.concatenate([b.padded_q for b, _ in rows])
    rejected = np.concatenate([b.seqlen_q - 1 - (0 if a is None else a) for b, a in rows])
    assert (kind == KIND_CHUNK).sum() and (kind == KIND_FINAL).sum()
    assert (padded > q).sum(), "CP padding"
    assert ((kind == KIND_DECODE) & (q > 1) & (rejected > 0)).sum(), "rejected drafts"
    assert ((kind == KIND_DECODE) & (q > 1) & (rejected == 0)).sum(), "all drafts accepted"
    assert max(b.seqlen_k.max() for b, _ in rows if len(b)) > 50_000
    assert any(not len(b) for b, _ in rows), "an empty batch"
    assert any(a is None for _, a in rows) and any(a is not None for _, a in rows)


@pytest.mark.parametrize("mtp", [False, True], ids=["no_mtp", "mtp"])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_matches_calc_flops(batches, model, mtp):
    est = FlopsEstimator(model)
    assert mismatches(est, est.cost_model(), batches, mtp) == []


def test_byte_sizes_reach_the_cost(batches):
    est = FlopsEstimator(V4F, weight_bytes=2.0, expert_weight_bytes=0.5, kv_bytes=1.0,
                         index_kv_bytes=0.5)
    assert mismatches(est, est.cost_model(), batches, mtp=True) == []


@pytest.mark.parametrize("wrong", [
    FlopsEstimator(dataclasses.replace(V3, num_hidden_layers=60)).cost_model(),  # every total
    FlopsEstimator(V32).cost_model(),  # the indexer
    FlopsEstimator(V3, kv_bytes=1.0).cost_model(),  # bytes only
    FlopsEstimator(V3, expert_weight_bytes=0.5).cost_model(),  # weights only
], ids=["layers", "indexer", "kv_bytes", "expert_bytes"])
def test_a_wrong_cost_is_caught(batches, wrong):
    non_empty = [x for x in batches if len(x[1])]
    assert len(mismatches(FlopsEstimator(V3), wrong, non_empty, mtp=False)) == len(non_empty)


def test_empty_batch_costs_nothing(batches):
    empty = next(b for _, b, _ in batches if not len(b))
    for model in MODELS:
        cost = FlopsEstimator(model).cost_model().batch(empty, None, True)
        assert (cost.model_flops, cost.executed_flops, cost.bytes) == (0.0, 0.0, 0.0)


def test_a_plan_costs_a_step_cost_per_rank():
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=64, num_kv_blocks=64,
                                      block_size=16, dp_size=2))
    for i in range(3):
        sched.add_sequence(seq_id=i, prompt_len=40, max_new_tokens=4)
    plan = sched.schedule()
    cost_model = FlopsEstimator(V3).cost_model()
    costs = cost_model.plan(plan)
    assert [type(c) for c in costs] == [_core.StepCost] * 2
    for cost, b in zip(costs, plan.batches):
        want = cost_model.batch(b)
        assert (cost.model_flops, cost.executed_flops, cost.bytes) == \
            (want.model_flops, want.executed_flops, want.bytes)
    assert costs[0].bytes > 0 and costs[0].model_flops > 0


def test_accepted_of_the_wrong_length_is_refused(batches):
    b = next(b for _, b, _ in batches if len(b) > 1)
    with pytest.raises(ValueError, match=f"accepted has {len(b) - 1} values; the batch has "
                                         f"{len(b)} rows"):
        FlopsEstimator(V3).cost_model().batch(b, np.zeros(len(b) - 1, np.int64))


def test_mtp_needs_an_mtp_module(batches):
    b = next(b for _, b, _ in batches if len(b))
    no_mtp = dataclasses.replace(V3, num_nextn_predict_layers=0)
    with pytest.raises(ValueError, match="has no MTP module"):
        FlopsEstimator(no_mtp).cost_model().batch(b, None, True)


def test_cost_model_is_built_once():
    est = FlopsEstimator(V3)
    assert est.cost_model() is est.cost_model()
