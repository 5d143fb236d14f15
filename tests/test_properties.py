"""Property tests: random configs and arrivals driven through an engine loop, with the
invariants of docs/scheduling.md checked after every call."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st

from engine import KIND_DECODE, SchedulerConfig
from engine.config import DP_ASSIGNS, ENGINE_TYPES, PREEMPT_ORDERS
from tests.helpers import IMPLS, hash_block_size, make_scheduler, prefix_hash_ids
from tests.invariants import blocks_for, check_invariants, check_seqlen_k, footprint, snapshot

pytestmark = pytest.mark.core


@st.composite
def scenarios(draw, pressure=False):
    """(config, requests); a request is (arrival step, prompt_len, max_new_tokens) and its
    seq id is its list position. The KV pool is often between the largest request and half
    a rank's share of all of them; `pressure` keeps it there and makes sequences arrive
    together on a decoding engine, so that decodes run short of blocks and preempt."""
    cp_size = draw(st.integers(1, 3))
    config = dict(
        engine_type=draw(st.sampled_from(("normal", "completion") if pressure else ENGINE_TYPES)),
        preempt_order=draw(st.sampled_from(PREEMPT_ORDERS)),
        dp_assign=draw(st.sampled_from(DP_ASSIGNS)),
        dp_size=draw(st.integers(1, 3)),
        cp_size=cp_size,
        num_mtp=draw(st.integers(0, 2)),
        overlap=draw(st.booleans()),
        block_size=draw(st.sampled_from((1, 2, 4, 16))),
        max_num_batched_tokens=draw(st.integers(2 * cp_size, 64)),
        max_num_seqs=draw(st.integers(2 if pressure else 1, 8)),
        max_prefill_chunk=draw(st.none() | st.integers(2 * cp_size, 32)),
        lookahead_slots=draw(st.none() | st.integers(0, 4)),
        prefix_caching=draw(st.booleans()),
        session_retention=draw(st.booleans()),
        host_kv_blocks=draw(st.sampled_from((0, 2, 16))),
    )
    # Mixed batches (9.15): a normal engine's choice, where the budget holds a decode row.
    config["mixed_batches"] = (config["engine_type"] == "normal"
                               and config["max_num_batched_tokens"] >= 1 + config["num_mtp"]
                               and draw(st.booleans()))
    request = st.tuples(st.integers(0, 2 if pressure else 20), st.integers(1, 60), st.integers(1, 20))
    reqs = draw(st.lists(request, min_size=2 if pressure else 1, max_size=12))
    cfg = SchedulerConfig(**config, num_kv_blocks=1)
    needs = [blocks_for(cfg, footprint(cfg, p, m)) for _, p, m in reqs]
    tight = st.integers(max(2, max(needs) - 1), max(2, max(needs), sum(needs) // (2 * cfg.dp_size)))
    config["num_kv_blocks"] = draw(tight if pressure else st.integers(2, 64) | tight)
    return config, reqs


def draw_accepted(rng, plan):
    """Random accepted drafts per row (decode rows only), flat or one list per rank."""
    per_rank = [np.where(b.kind == KIND_DECODE, rng.integers(0, np.maximum(b.seqlen_q, 1)), 0)
                for b in plan.batches]
    return [x.tolist() for x in per_rank] if rng.random() < 0.5 else np.concatenate(per_rank)


class Engine:
    """The loop an engine runs: schedule(i), then postprocess(i) -- or postprocess(i-1)
    with overlap -- checking the invariants after every call."""

    def __init__(self, impl, config, reqs, seed):
        self.cfg = SchedulerConfig(**config)
        self.sched = make_scheduler(impl, **config)
        self.reqs = reqs
        self.rng = np.random.default_rng(seed)
        self.hash_block = hash_block_size(self.rng, self.cfg.block_size)
        self.hash_ids = [prefix_hash_ids(self.rng, p, self.hash_block) for _, p, _ in reqs]
        # A completion engine's requests may arrive with their KV in transfer (9.14); each
        # transfer ends with a chance of 1 in 3 per step, before or after its admission.
        self.kv_rng = np.random.default_rng((seed, 1))
        self.kv_transfer = [self.cfg.engine_type == "completion" and self.kv_rng.random() < 0.5
                            for _ in reqs]
        # turns of a few sessions (session_affinity), and sequences of none (-1)
        self.session_id = np.random.default_rng((seed, 2)).integers(-1, 4, len(reqs))
        self.session_rng = np.random.default_rng((seed, 3))  # sessions ending now and then
        self.ids = []
        self.plans = []
        self.finished = []  # every id postprocess returned, in order
        self.finished_at_add = []

    def add_arrivals(self, step):
        for i, (arrival, prompt_len, max_new_tokens) in enumerate(self.reqs):
            if arrival != step:
                continue
            self.sched.add_sequence(seq_id=i, prompt_len=prompt_len,
                                    max_new_tokens=max_new_tokens, arrival_time=float(step),
                                    hash_ids=self.hash_ids[i], hash_block_size=self.hash_block,
                                    kv_transfer=self.kv_transfer[i],
                                    session_id=int(self.session_id[i]))
            self.ids.append(i)
            seq = self.sched.seq(i)
            completion = self.cfg.engine_type == "completion"
            assert seq.output_len == int(completion), f"seq {i}: output_len {seq.output_len} at add"
            if blocks_for(self.cfg, footprint(self.cfg, prompt_len, max_new_tokens)) \
                    > self.cfg.num_kv_blocks:
                want = "rejected"
            elif completion and max_new_tokens == 1:
                want = "finished"  # arrived with its only token already generated
                self.finished_at_add.append(i)
            else:
                want = "waiting"
            assert seq.status == want, f"seq {i} is {seq.status} after add, not {want}"
            assert seq.kv_pending == (self.kv_transfer[i] and want == "waiting"), f"seq {i}"

    def end_transfers(self):
        for i in self.ids:
            if self.sched.seq(i).kv_pending and self.kv_rng.random() < 1 / 3:
                self.sched.kv_arrived(i)
                check_invariants(self.sched, self.cfg, self.ids)

    def end_sessions(self):
        if self.session_rng.random() < 0.1:
            self.sched.end_session(int(self.session_rng.integers(0, 4)))
            check_invariants(self.sched, self.cfg, self.ids)

    def schedule(self):
        before = snapshot(self.sched, self.ids)
        plan = self.sched.schedule()
        check_invariants(self.sched, self.cfg, self.ids, plan)
        check_seqlen_k(self.sched, plan, before)
        self.plans.append(plan)
        return plan

    def postprocess(self, plan):
        result = self.sched.postprocess(plan, draw_accepted(self.rng, plan))
        check_invariants(self.sched, self.cfg, self.ids)
        self.finished += result.finished.tolist()

    def run(self):
        last_arrival = max(r[0] for r in self.reqs)
        limit = 50 * sum(p + m for _, p, m in self.reqs) + 200
        outstanding = None
        for step in range(limit):
            self.add_arrivals(step)
            self.end_transfers()
            self.end_sessions()
            if step >= last_arrival and self.sched.is_finished():
                break
            plan = self.schedule()
            if self.cfg.overlap:
                if outstanding is not None:
                    self.postprocess(outstanding)
                outstanding = plan
            else:
                self.postprocess(plan)
        else:
            pytest.fail(f"no drain in {limit} steps")
        if outstanding is not None:
            self.postprocess(outstanding)


def check_run(impl, scenario, seed):
    """Run to the end; every sequence ends exactly once and every block comes back."""
    config, reqs = scenario
    engine = Engine(impl, config, reqs, seed)
    engine.run()
    sched, cfg, plans = engine.sched, engine.cfg, engine.plans

    assert sched.is_finished()
    for rank in range(cfg.dp_size):
        assert sched.num_free_blocks(rank) == cfg.num_kv_blocks, f"rank {rank} leaks blocks"

    seqs = {i: sched.seq(i) for i in engine.ids}
    rejected = [i for i, s in seqs.items() if s.status == "rejected"]
    finished = [i for i, s in seqs.items() if s.status == "finished"]
    assert sorted(rejected + finished) == sorted(engine.ids)
    reported = Counter(i for plan in plans for i in plan.rejected.tolist())
    assert reported == Counter(rejected), "each rejection is reported in exactly one plan"
    assert Counter(engine.finished) == Counter(set(finished) - set(engine.finished_at_add)), \
        "each finish is returned by exactly one postprocess"
    for i in finished:
        want = 1 if cfg.engine_type == "prompt" else seqs[i].max_new_tokens
        assert seqs[i].output_len == want, f"seq {i}: output_len {seqs[i].output_len} != {want}"
    preempted = Counter(i for plan in plans for i in plan.preempted.tolist())
    for i, s in seqs.items():
        assert s.num_preemptions == preempted[i], f"seq {i}: num_preemptions {s.num_preemptions}"

    event(f"engine_type={cfg.engine_type}")
    event(f"mixed_batches={cfg.mixed_batches}")
    event(f"preempted={bool(preempted)}")
    event(f"rejected={bool(rejected)}")
    event(f"kv_transfer={any(engine.kv_transfer)}")


SEEDS = st.integers(0, 2**32 - 1)
QUICK, DEEP = settings(max_examples=60, deadline=None), settings(max_examples=340, deadline=None)


# Each its own function: hypothesis keys its example database by the test's source. The
# quick tier draws 60 engines of each property; the slow tier 340 more.
@pytest.mark.parametrize("impl", IMPLS)
@QUICK
@given(scenario=scenarios(), seed=SEEDS)
def test_every_sequence_ends_once(impl, scenario, seed):
    check_run(impl, scenario, seed)


@pytest.mark.parametrize("impl", IMPLS)
@QUICK
@given(scenario=scenarios(pressure=True), seed=SEEDS)
def test_every_sequence_ends_once_under_kv_pressure(impl, scenario, seed):
    check_run(impl, scenario, seed)


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
@DEEP
@given(scenario=scenarios(), seed=SEEDS)
def test_every_sequence_ends_once_deep(impl, scenario, seed):
    check_run(impl, scenario, seed)


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
@DEEP
@given(scenario=scenarios(pressure=True), seed=SEEDS)
def test_every_sequence_ends_once_under_kv_pressure_deep(impl, scenario, seed):
    check_run(impl, scenario, seed)
