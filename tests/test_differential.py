"""Differential test: the C++ Scheduler and the ReferenceScheduler (the oracle), driven in
lockstep with identical inputs, make identical decisions after every call."""

import numpy as np
import pytest

from engine import ReferenceScheduler, Scheduler, SchedulerConfig
from engine.config import DP_ASSIGNS, ENGINE_TYPES, PREEMPT_ORDERS
from engine.scheduler_config import MAX_SEQ_TOKENS
from tests.helpers import IMPLS, hash_block_size, make_scheduler, prefix_hash_ids
from tests.invariants import blocks_for, footprint
from tests.test_bad_input import REFUSALS, ready
from tests.test_properties import draw_accepted

pytestmark = pytest.mark.core

NUM_SCENARIOS = 1000
QUICK_SCENARIOS = 250  # the quick tier's; the slow tier runs the rest
PLAN_FIELDS = ("phase", "step", "preempted", "rejected")
BATCH_FIELDS = ("rank", "seq_ids", "seqlen_q", "seqlen_k", "padded_q", "kind", "block_tables",
                "empty", "kv_blocks_free", "num_waiting", "num_running", "num_hit_tokens",
                "num_reloaded_blocks", "num_evicted_blocks", "num_retained_blocks")
SEQ_FIELDS = ("num_tokens", "num_cached", "num_inflight", "output_len", "status", "blocks",
              "num_preemptions", "recomputed_tokens", "dp_rank", "prefix_hit_tokens",
              "kv_pending")


def random_scenario(rng):
    """(config, requests, depth): the ranges of the property tests, plus `depth`, how many
    plans stay outstanding before the oldest is post-processed (legal at any depth, 9.2)."""
    cp_size = int(rng.integers(1, 4))
    config = dict(
        engine_type=str(rng.choice(ENGINE_TYPES)),
        preempt_order=str(rng.choice(PREEMPT_ORDERS)),
        dp_assign=str(rng.choice(DP_ASSIGNS)),
        dp_size=int(rng.integers(1, 4)),
        cp_size=cp_size,
        num_mtp=int(rng.integers(0, 3)),
        overlap=bool(rng.integers(0, 2)),
        block_size=int(rng.choice([1, 2, 4, 16])),
        max_num_batched_tokens=int(rng.integers(2 * cp_size, 65)),
        max_num_seqs=int(rng.integers(1, 9)),
        max_prefill_chunk=None if rng.random() < 0.5 else int(rng.integers(2 * cp_size, 33)),
        lookahead_slots=None if rng.random() < 0.5 else int(rng.integers(0, 5)),
    )
    max_arrival = int(rng.choice([0, 2, 20]))
    reqs = [(int(rng.integers(0, max_arrival + 1)), int(rng.integers(1, 61)), int(rng.integers(1, 21)))
            for _ in range(int(rng.integers(1, 13)))]
    cfg = SchedulerConfig(**config, num_kv_blocks=1)
    needs = [blocks_for(cfg, footprint(cfg, p, m)) for _, p, m in reqs]
    # Most pools lie between the largest request and half a rank's share of all.
    high = max(2, max(needs), sum(needs) // (2 * cfg.dp_size))
    config["num_kv_blocks"] = int(rng.integers(2, 65) if rng.random() < 0.25
                                  else rng.integers(max(2, max(needs) - 1), high + 1))
    return config, reqs, int(rng.integers(0, 3))


def draw_mixed(seed, config):
    """Whether a normal engine runs mixed batches (9.15): half of them, where the budget
    holds a decode row. Drawn from a generator of its own, so each seed keeps the scenario
    it had before mixed batches existed."""
    return (config["engine_type"] == "normal"
            and config["max_num_batched_tokens"] >= 1 + config["num_mtp"]
            and bool(np.random.default_rng((seed, 2)).random() < 0.5))


def assert_same(where, field, got, want):
    if isinstance(want, np.ndarray):
        same = (isinstance(got, np.ndarray) and got.dtype == want.dtype
                and got.shape == want.shape and np.array_equal(got, want))
    else:
        same = got == want
    assert same, f"{where}: {field}: cpp {got!r} != reference {want!r}"


class Lockstep:
    def __init__(self, seed, tight=False):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        config, self.reqs, self.depth = random_scenario(self.rng)
        config["prefix_caching"] = bool(self.rng.random() < 0.9)
        config["mixed_batches"] = draw_mixed(seed, config)
        self.hash_block = hash_block_size(self.rng, config["block_size"])
        self.hash_ids = [prefix_hash_ids(self.rng, p, self.hash_block) for _, p, _ in self.reqs]
        # A completion engine's requests may arrive with their KV in transfer (9.14); each
        # transfer ends with a chance of 1 in 3 per step, before or after its admission.
        self.kv_rng = np.random.default_rng((seed, 1))
        self.kv_transfer = [config["engine_type"] == "completion" and self.kv_rng.random() < 0.5
                            for _ in self.reqs]
        # turns of a few sessions (session_affinity), and sequences of none (-1)
        self.session_id = np.random.default_rng((seed, 2)).integers(-1, 4, len(self.reqs))
        # session retention, a host KV tier, and sessions ending now and then (about one
        # step in ten)
        self.session_rng = np.random.default_rng((seed, 3))
        config["session_retention"] = bool(self.session_rng.random() < 0.5)
        config["host_kv_blocks"] = int(self.session_rng.choice([0, 0, 2, 16, 256]))
        if tight:  # a pool that evicts, prefixes it may serve again, and a host tier
            cfg = SchedulerConfig(**config)
            need = max(blocks_for(cfg, footprint(cfg, p, m)) for _, p, m in self.reqs)
            config.update(num_kv_blocks=need, prefix_caching=True,
                          host_kv_blocks=int(self.session_rng.choice([2, 16, 256])))
            self.hash_ids = [[f * 1_000_000 + i for i in range(-(-p // self.hash_block))]
                             for (_, p, _), f in zip(self.reqs, self.session_rng.integers(
                                 0, 2, len(self.reqs)))]  # two families, whole prompts
        self.dp_size = config["dp_size"]
        self.cpp = make_scheduler("cpp", **config)
        self.ref = make_scheduler("reference", **config)
        self.ids = []
        self.outstanding = []  # (cpp plan, reference plan), oldest first

    def compare_state(self, where):
        for i in self.ids:
            got, want = self.cpp.seq(i), self.ref.seq(i)
            for f in SEQ_FIELDS:
                g, w = getattr(got, f), getattr(want, f)
                if f == "blocks":
                    g, w = [int(b) for b in g], list(w)
                assert_same(where, f"seq({i}).{f}", g, w)
        for r in range(self.dp_size):
            assert_same(where, f"num_free_blocks({r})", self.cpp.num_free_blocks(r),
                        self.ref.num_free_blocks(r))
        assert_same(where, "is_finished()", self.cpp.is_finished(), self.ref.is_finished())

    def add_arrivals(self, step):
        for i, (arrival, prompt_len, max_new_tokens) in enumerate(self.reqs):
            if arrival == step:
                for sched in (self.cpp, self.ref):
                    sched.add_sequence(seq_id=i, prompt_len=prompt_len,
                                       max_new_tokens=max_new_tokens, arrival_time=float(step),
                                       hash_ids=self.hash_ids[i], hash_block_size=self.hash_block,
                                       kv_transfer=self.kv_transfer[i],
                                       session_id=int(self.session_id[i]))
                self.ids.append(i)
        self.compare_state(f"seed {self.seed} step {step} after add_sequence")

    def end_transfers(self, step):
        """Transfers that end now; now and then a kv_arrived both must refuse alike."""
        for i in self.ids:
            if self.ref.seq(i).kv_pending:
                if self.kv_rng.random() < 1 / 3:
                    self.cpp.kv_arrived(i)
                    self.ref.kv_arrived(i)
            elif any(self.kv_transfer) and self.kv_rng.random() < 0.05:
                got, want = refusal(lambda impl: (self.cpp if impl == "cpp" else self.ref)
                                    .kv_arrived(i))
                assert_same(f"seed {self.seed} step {step}", f"kv_arrived({i})", got, want)
        self.compare_state(f"seed {self.seed} step {step} after kv_arrived")

    def end_sessions(self, step):
        if self.session_rng.random() < 0.1:
            session = int(self.session_rng.integers(0, 4))
            self.cpp.end_session(session)
            self.ref.end_session(session)
            self.compare_state(f"seed {self.seed} step {step} after end_session({session})")

    def schedule(self, step):
        where = f"seed {self.seed} step {step} schedule"
        got, want = self.cpp.schedule(), self.ref.schedule()
        for f in PLAN_FIELDS:
            assert_same(where, f"plan.{f}", getattr(got, f), getattr(want, f))
        assert_same(where, "len(plan.batches)", len(got.batches), len(want.batches))
        for r, (g, w) in enumerate(zip(got.batches, want.batches)):
            for f in BATCH_FIELDS:
                assert_same(where, f"batches[{r}].{f}", getattr(g, f), getattr(w, f))
        self.compare_state(where)
        self.outstanding.append((got, want))

    def postprocess_oldest(self, step):
        got_plan, want_plan = self.outstanding.pop(0)
        where = f"seed {self.seed} step {step} postprocess of plan {want_plan.step}"
        accepted = draw_accepted(self.rng, want_plan)
        got = self.cpp.postprocess(got_plan, accepted)
        want = self.ref.postprocess(want_plan, accepted)
        assert_same(where, "finished", got.finished, want.finished)
        assert_same(where, "discarded_tokens", got.discarded_tokens, want.discarded_tokens)
        self.compare_state(where)

    def run(self):
        last_arrival = max(r[0] for r in self.reqs)
        # No drain assertion here (the property tests make it): only a bound on the work.
        for step in range(10 * sum(p + m for _, p, m in self.reqs) + 100):
            self.add_arrivals(step)
            self.end_transfers(step)
            self.end_sessions(step)
            if step >= last_arrival and self.ref.is_finished():
                break
            self.schedule(step)
            while len(self.outstanding) > self.depth:
                self.postprocess_oldest(step)
        while self.outstanding:
            self.postprocess_oldest(step)


@pytest.mark.parametrize("seed", [*range(QUICK_SCENARIOS), *(
    pytest.param(seed, marks=pytest.mark.slow) for seed in range(QUICK_SCENARIOS, NUM_SCENARIOS))])
def test_cpp_matches_reference(seed):
    Lockstep(seed).run()


@pytest.mark.parametrize("seed", range(50))
def test_cpp_matches_reference_with_a_pool_that_evicts_to_a_host_tier(seed):
    Lockstep(seed, tight=True).run()


# ---- Refusals and rejections: both implementations alike ---------------------------------

def refusal(call):
    """(exception class, message) of call on each implementation, C++ first."""
    out = []
    for impl in IMPLS:
        with pytest.raises(Exception) as e:
            call(impl)
        out.append((type(e.value), str(e.value)))
    return out


@pytest.mark.parametrize("call, error, words", REFUSALS)
def test_both_refuse_alike(call, error, words):
    def on(impl):
        s, plan = ready(impl)
        call(s, plan)
    got, want = refusal(on)
    assert got == want and got[0] is error and words in got[1]


@pytest.mark.parametrize("config", [None, 16, {"block_size": 16}])
def test_both_refuse_what_is_no_config(config):
    got, want = refusal(lambda impl: (Scheduler if impl == "cpp" else ReferenceScheduler)(config))
    assert got == want and got[0] is TypeError


@pytest.mark.parametrize("engine_type", ENGINE_TYPES)
@pytest.mark.parametrize("prompt_len, max_new_tokens", [(3 * 10**9, 1), (MAX_SEQ_TOKENS, 1)])
def test_both_reject_a_request_too_long_alike(engine_type, prompt_len, max_new_tokens):
    """(Lengths whose sum overflows int64: tests/test_bad_input.py, in a fresh interpreter.)"""
    cpp, ref = (make_scheduler(impl, engine_type=engine_type) for impl in IMPLS)
    records = [s.add_sequence(seq_id=7, prompt_len=prompt_len, max_new_tokens=max_new_tokens)
               for s in (cpp, ref)]
    fields = ("seq_id", "dp_rank", "status", "output_len", "num_preemptions",
              "recomputed_tokens", "prefix_hit_tokens", "reason")
    assert [getattr(records[0], f) for f in fields] == [getattr(records[1], f) for f in fields]
    assert records[0].status == "rejected"
    for f in SEQ_FIELDS + ("prompt_len", "max_new_tokens", "footprint"):
        got, want = getattr(cpp.seq(7), f), getattr(ref.seq(7), f)
        assert (list(got) if f == "blocks" else got) == want, f
    assert cpp.schedule().rejected.tolist() == ref.schedule().rejected.tolist() == [7]
