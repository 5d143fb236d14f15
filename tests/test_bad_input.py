"""Bad arguments raise ValueError naming the value, and change nothing in the scheduler;
bad objects are refused by the bound object they are handed to; nothing a caller can pass,
from any thread, crashes the interpreter (cases that once did run in a fresh one)."""

import dataclasses
import json
import math
import re
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from engine import EngineConfig, LLMEngine, ReferenceScheduler, Scheduler, SchedulerConfig, _core
from engine.config import ENGINE_TYPES
from engine.scheduler_config import MAX_SEQ_TOKENS
from harness.record.table_reader import read_requests
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from tests.helpers import IMPLS, in_subprocess, make_requests, make_scheduler

pytestmark = pytest.mark.core


@pytest.mark.parametrize("field, value, words", [
    ("max_num_batched_tokens", 0, "max_num_batched_tokens must be >= 1, got 0"),
    ("block_size", -4, "block_size must be >= 1, got -4"),
    ("num_mtp", -1, "num_mtp must be >= 0, got -1"),
    ("dp_size", 1.5, "dp_size must be an integer, got 1.5"),
    ("engine_type", "decode", "engine_type must be one of normal, prompt, completion; got 'decode'"),
    ("preempt_order", "oldest", "got 'oldest'"),
    ("dp_assign", "random", "got 'random'"),
    ("overlap", 1, "overlap must be a bool"),
    ("max_prefill_chunk", 0, "max_prefill_chunk must be >= 1, got 0"),
])
def test_config_field_errors_name_the_value(field, value, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        SchedulerConfig(**{field: value})


def test_budget_below_two_cp_is_refused():
    with pytest.raises(ValueError, match="max_num_batched_tokens=7 is below 2 \\* cp_size = 8"):
        SchedulerConfig(max_num_batched_tokens=7, cp_size=4)
    with pytest.raises(ValueError, match="max_prefill_chunk=3 is below 2 \\* cp_size = 4"):
        SchedulerConfig(cp_size=2, max_prefill_chunk=3)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kwargs, words", [
    (dict(seq_id=5, prompt_len=0, max_new_tokens=3), "prompt_len must be >= 1, got 0"),
    (dict(seq_id=5, prompt_len=3, max_new_tokens=-2), "max_new_tokens must be >= 1, got -2"),
    (dict(seq_id=0, prompt_len=3, max_new_tokens=3), "duplicate seq_id 0"),
])
def test_add_sequence_errors(impl, kwargs, words):
    s = make_scheduler(impl)
    make_requests(s, (4, 4))
    with pytest.raises(ValueError, match=words):
        s.add_sequence(**kwargs)
    assert s.schedule().batches[0].seq_ids.tolist() == [0]  # nothing else was queued


@pytest.mark.parametrize("impl", IMPLS)
def test_unknown_seq_id(impl):
    s = make_scheduler(impl)
    with pytest.raises(ValueError, match="unknown seq_id 42"):
        s.seq(42)


@pytest.mark.parametrize("impl", IMPLS)
def test_postprocess_twice_or_out_of_order(impl):
    s = make_scheduler(impl, overlap=True)
    make_requests(s, (4, 4))
    p0 = s.schedule()
    p1 = s.schedule()
    with pytest.raises(ValueError, match="plan 1 is not the oldest outstanding plan; post-process plan 0 first"):
        s.postprocess(p1)
    s.postprocess(p0)
    before = (s.seq(0).num_tokens, s.seq(0).num_cached, s.seq(0).num_inflight)
    with pytest.raises(ValueError, match="plan 0 was already post-processed"):
        s.postprocess(p0)
    assert (s.seq(0).num_tokens, s.seq(0).num_cached, s.seq(0).num_inflight) == before


@pytest.mark.parametrize("impl", IMPLS)
def test_plan_from_another_scheduler(impl):
    s, other = make_scheduler(impl), make_scheduler(impl)
    make_requests(s, (4, 4))
    make_requests(other, (4, 4))
    with pytest.raises(ValueError, match="not made by this scheduler"):
        s.postprocess(other.schedule())


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("accepted, words", [
    ([0, 0], "accepted has 2 values; the plan scheduled 1 sequences"),
    ([3], r"accepted\[0\] = 3 is outside 0..2"),
    (np.array([-1]), r"accepted\[0\] = -1 is outside 0..2"),
    ([[0], [0]], "accepted has 2 values"),
])
def test_bad_accepted_changes_nothing(impl, accepted, words):
    s = make_scheduler(impl, num_mtp=2)
    make_requests(s, (4, 10))
    s.postprocess(s.schedule())
    plan = s.schedule()
    before = (s.seq(0).num_tokens, s.seq(0).num_cached, s.seq(0).num_inflight)
    with pytest.raises(ValueError, match=words):
        s.postprocess(plan, accepted)
    assert (s.seq(0).num_tokens, s.seq(0).num_cached, s.seq(0).num_inflight) == before
    s.postprocess(plan, [2])  # the plan is still outstanding and can be post-processed
    assert s.seq(0).num_tokens == 8


@pytest.mark.parametrize("impl", IMPLS)
def test_accepted_for_a_prefill_row_must_be_zero(impl):
    s = make_scheduler(impl, num_mtp=2)
    make_requests(s, (4, 10))
    with pytest.raises(ValueError, match=r"accepted\[0\] = 1 is outside 0..0"):
        s.postprocess(s.schedule(), [1])


@pytest.mark.parametrize("impl", IMPLS)
def test_too_many_hash_ids(impl):
    s = make_scheduler(impl, block_size=4)
    with pytest.raises(ValueError, match="hash_ids has 3 entries; a 8-token prompt has at most 2 blocks of 4"):
        s.add_sequence(seq_id=0, prompt_len=8, max_new_tokens=1, hash_ids=[1, 2, 3])
    assert s.is_finished()


@pytest.mark.parametrize("engine_type", ["prompt", "completion"])
def test_mixed_batches_needs_a_normal_engine(engine_type):
    with pytest.raises(ValueError, match=f"mixed_batches=True needs a normal engine; this is a "
                                         f"{engine_type} engine"):
        SchedulerConfig(mixed_batches=True, engine_type=engine_type)


def test_mixed_batches_needs_a_budget_for_a_decode_row():
    with pytest.raises(ValueError, match=re.escape(
            "mixed_batches=True needs max_num_batched_tokens >= 1 + num_mtp = 3 (a decode row), "
            "got 2")):
        SchedulerConfig(mixed_batches=True, num_mtp=2, max_num_batched_tokens=2)
    SchedulerConfig(mixed_batches=True, num_mtp=2, max_num_batched_tokens=3)
    SchedulerConfig(num_mtp=2, max_num_batched_tokens=2)  # the vote's prompt rounds: no decode


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("phase", ["prompt", "decode"])
def test_a_mixed_engine_takes_no_vote(impl, phase):
    s = make_scheduler(impl, mixed_batches=True)
    make_requests(s, (4, 2))
    with pytest.raises(ValueError, match=re.escape(
            f"a mixed_batches engine holds no vote (every step is one mixed round); got phase "
            f"{phase}")):
        s.schedule(phase=phase)
    assert s.seq(0).status == "waiting" and s.num_outstanding_plans == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_phase(impl):
    with pytest.raises(ValueError, match="phase must be prompt or decode, got 'both'"):
        make_scheduler(impl).schedule(phase="both")
    with pytest.raises(ValueError, match="a prompt engine cannot run a decode round"):
        make_scheduler(impl, engine_type="prompt").schedule(phase="decode")
    with pytest.raises(ValueError, match="a completion engine cannot run a prompt round"):
        make_scheduler(impl, engine_type="completion").schedule(phase="prompt")


@pytest.mark.parametrize("impl", IMPLS)
def test_kv_transfer_on_a_prompt_engine_is_refused(impl):
    s = make_scheduler(impl, engine_type="prompt")
    with pytest.raises(ValueError, match="kv_transfer=True needs a completion engine; this is a "
                                         "prompt engine"):
        s.add_sequence(seq_id=0, prompt_len=4, max_new_tokens=2, kv_transfer=True)
    assert s.is_finished()


@pytest.mark.parametrize("impl", IMPLS)
def test_kv_arrived_refuses_a_sequence_that_awaits_no_transfer(impl):
    """Its KV already arrived, it finished, it finished when added (one token), or it was
    rejected: none of them reserved anything, none awaits a transfer."""
    s = make_scheduler(impl, engine_type="completion", block_size=4, num_kv_blocks=4)
    for i, (p, m) in enumerate([(4, 2), (4, 1), (40, 2)]):
        s.add_sequence(seq_id=i, prompt_len=p, max_new_tokens=m, kv_transfer=True)
    assert [(s.seq(i).status, s.seq(i).kv_pending) for i in range(3)] == \
        [("waiting", True), ("finished", False), ("rejected", False)]
    s.kv_arrived(0)
    for i, status in [(0, "waiting"), (1, "finished"), (2, "rejected")]:
        with pytest.raises(ValueError, match=re.escape(f"sequence {i} awaits no KV transfer "
                                                       f"({status})")):
            s.kv_arrived(i)
    drain(s)
    with pytest.raises(ValueError, match=re.escape("sequence 0 awaits no KV transfer (finished)")):
        s.kv_arrived(0)


def test_kv_arrived_for_a_sequence_that_left_is_unknown():
    s = Scheduler(SchedulerConfig(engine_type="completion"), retain_finished=False)
    s.add_sequence(seq_id=0, prompt_len=4, max_new_tokens=2, kv_transfer=True)
    s.kv_arrived(0)
    drain(s)
    with pytest.raises(ValueError, match="unknown seq_id 0"):
        s.kv_arrived(0)


# ---- Values beyond what a config field or the core holds (named with the limit) -----------

@pytest.mark.parametrize("kwargs, words", [
    (dict(num_kv_blocks=10**12),
     "num_kv_blocks must be a 32-bit integer, got 1000000000000 (at most 2147483647)"),
    (dict(block_size=2**31), "block_size must be a 32-bit integer, got 2147483648 (at most 2147483647)"),
    (dict(num_kv_blocks=2**64),
     "num_kv_blocks must be a 32-bit integer, got 18446744073709551616 (at most 2147483647)"),
    (dict(num_kv_blocks=-2**64), "num_kv_blocks must be >= 1, got -18446744073709551616"),
    (dict(max_prefill_chunk=-2**40), "max_prefill_chunk must be >= 1, got -1099511627776"),
    # lengths the core adds to a sequence's token counts, each within MAX_SEQ_TOKENS
    (dict(block_size=2**30), "block_size must be <= 1073741823, got 1073741824"),
    (dict(cp_size=2**29, max_num_batched_tokens=2**31 - 1), "cp_size must be <= 536870911, got 536870912"),
    (dict(lookahead_slots=2**30), "lookahead_slots must be <= 1073741823, got 1073741824"),
    (dict(num_mtp=2**30 - 1, overlap=True),
     "the lookahead (1 + num_mtp) * (1 + overlap) must be <= 1073741823, got 2147483648"),
])
def test_config_values_beyond_the_core_name_the_field_and_its_limit(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        SchedulerConfig(**kwargs)


def test_any_object_with_the_fields_is_range_checked_by_name():
    fields = {**dataclasses.asdict(SchedulerConfig()), "num_kv_blocks": 2**64}
    with pytest.raises(ValueError, match=re.escape("num_kv_blocks must be a 32-bit integer")):
        Scheduler(SimpleNamespace(**fields))


@pytest.mark.parametrize("impl", (Scheduler, ReferenceScheduler))
@pytest.mark.parametrize("config", [None, 16, {"block_size": 16}])
def test_a_scheduler_needs_a_config(impl, config):
    with pytest.raises(TypeError, match=f"config must be a SchedulerConfig, got {type(config).__name__}"):
        impl(config)


# ---- The Python API's refusals: the same in both implementations ---------------------------
# (tests/test_differential.py holds the two to the same exception and message.)

def ready(impl):
    """A scheduler (num_mtp 2) with sequence 0 decoding and its decode plan outstanding."""
    s = make_scheduler(impl, num_mtp=2)
    make_requests(s, (4, 10))
    s.postprocess(s.schedule())
    return s, s.schedule()


def add(**kwargs):
    return lambda s, plan: s.add_sequence(**{**dict(seq_id=5, prompt_len=32, max_new_tokens=3),
                                             **kwargs})


def accept(accepted):
    return lambda s, plan: s.postprocess(plan, accepted)


R = pytest.param
REFUSALS = [  # call(scheduler, outstanding plan), exception, message
    R(add(seq_id=True), ValueError, "seq_id must be an integer, got True", id="seq_id-bool"),
    R(add(seq_id=None), ValueError, "seq_id must be an integer, got None", id="seq_id-None"),
    R(add(seq_id=2**64), ValueError, "seq_id must be a 64-bit integer, got 18446744073709551616",
      id="seq_id-beyond-int64"),
    R(add(seq_id=-2**63 - 1), ValueError,
      "seq_id must be a 64-bit integer, got -9223372036854775809", id="seq_id-below-int64"),
    R(add(prompt_len=True), ValueError, "prompt_len must be an integer, got True", id="prompt-bool"),
    R(add(prompt_len=np.True_), ValueError, "prompt_len must be an integer, got np.True_",
      id="prompt-numpy-bool"),
    R(add(prompt_len=32.0), ValueError, "prompt_len must be an integer, got 32.0", id="prompt-float"),
    R(add(prompt_len="32"), ValueError, "prompt_len must be an integer, got '32'", id="prompt-str"),
    R(add(prompt_len=2**64), ValueError,
      "prompt_len must be a 64-bit integer, got 18446744073709551616", id="prompt-beyond-int64"),
    R(add(max_new_tokens=False), ValueError, "max_new_tokens must be an integer, got False",
      id="max_new_tokens-bool"),
    R(add(max_new_tokens=2.5), ValueError, "max_new_tokens must be an integer, got 2.5",
      id="max_new_tokens-float"),
    R(add(arrival_time=math.nan), ValueError, "arrival_time must be finite, got nan", id="arrival-nan"),
    R(add(arrival_time=math.inf), ValueError, "arrival_time must be finite, got inf", id="arrival-inf"),
    R(add(arrival_time=-math.inf), ValueError, "arrival_time must be finite, got -inf",
      id="arrival-minus-inf"),
    R(add(arrival_time=np.float32("nan")), ValueError,
      "arrival_time must be finite, got np.float32(nan)", id="arrival-numpy-nan"),
    R(add(arrival_time=10**400), ValueError, "arrival_time must be finite, got 1000000",
      id="arrival-beyond-double"),
    R(add(arrival_time="1.0"), ValueError, "arrival_time must be a number, got '1.0'",
      id="arrival-str"),
    R(add(arrival_time=True), ValueError, "arrival_time must be a number, got True", id="arrival-bool"),
    R(add(arrival_time=None), ValueError, "arrival_time must be a number, got None", id="arrival-None"),
    R(add(hash_ids=[1.5]), ValueError, "hash_ids[0] must be an integer, got 1.5", id="hash-float"),
    R(add(hash_ids=[7, 2.0]), ValueError, "hash_ids[1] must be an integer, got 2.0",
      id="hash-integral-float"),
    R(add(hash_ids=np.array([1.0, 2.0])), ValueError,
      "hash_ids must hold integers, got an array of float64", id="hash-float-array"),
    R(add(hash_ids=[True]), ValueError, "hash_ids[0] must be an integer, got True", id="hash-bool"),
    R(add(hash_ids=np.array([True])), ValueError, "hash_ids must hold integers, got an array of bool",
      id="hash-bool-array"),
    R(add(hash_ids=[2**64]), ValueError,
      "hash_ids[0] must be a 64-bit integer, got 18446744073709551616", id="hash-beyond-int64"),
    R(add(hash_ids=np.array([1, 2**63], dtype=np.uint64)), ValueError,
      "hash_ids[1] must be a 64-bit integer, got 9223372036854775808", id="hash-uint64-array"),
    R(add(hash_ids="ab"), ValueError, "hash_ids must be None or a sequence of integers, got 'ab'",
      id="hash-str"),
    R(add(hash_ids=5), ValueError, "hash_ids must be None or a sequence of integers, got 5",
      id="hash-scalar"),
    R(add(hash_ids={1, 2}), ValueError, "hash_ids must be None or a sequence of integers, got {1, 2}",
      id="hash-set"),
    R(add(kv_transfer=1), ValueError, "kv_transfer must be a bool, got 1", id="kv_transfer-int"),
    R(add(kv_transfer=None), ValueError, "kv_transfer must be a bool, got None",
      id="kv_transfer-None"),
    R(add(kv_transfer="yes"), ValueError, "kv_transfer must be a bool, got 'yes'",
      id="kv_transfer-str"),
    R(add(kv_transfer=True), ValueError,
      "kv_transfer=True needs a completion engine; this is a normal engine",
      id="kv_transfer-normal-engine"),
    R(lambda s, plan: s.kv_arrived(5), ValueError, "unknown seq_id 5", id="kv_arrived-unknown"),
    R(lambda s, plan: s.kv_arrived(0), ValueError, "sequence 0 awaits no KV transfer (running)",
      id="kv_arrived-not-pending"),
    R(lambda s, plan: s.kv_arrived(True), ValueError, "seq_id must be an integer, got True",
      id="kv_arrived-bool"),
    R(lambda s, plan: s.end_session(-1), ValueError, "session_id must be >= 0, got -1",
      id="end_session-negative"),
    R(lambda s, plan: s.end_session(1.0), ValueError, "session_id must be an integer, got 1.0",
      id="end_session-float"),
    R(accept([1.5]), ValueError, "accepted[0] must be an integer, got 1.5", id="accepted-float"),
    R(accept([1.0]), ValueError, "accepted[0] must be an integer, got 1.0", id="accepted-integral-float"),
    R(accept(np.array([1.0])), ValueError, "accepted must hold integers, got an array of float64",
      id="accepted-float-array"),
    R(accept([np.array([1.0])]), ValueError, "accepted[0] must hold integers, got an array of float64",
      id="accepted-per-rank-float-array"),
    R(accept([[1.5]]), ValueError, "accepted[0][0] must be an integer, got 1.5",
      id="accepted-per-rank-float"),
    R(accept([True]), ValueError, "accepted[0] must be an integer, got True", id="accepted-bool"),
    R(accept([2**64]), ValueError, "accepted[0] must be a 64-bit integer, got 18446744073709551616",
      id="accepted-beyond-int64"),
    R(accept("1"), ValueError, "accepted must be None or a sequence of integers, got '1'",
      id="accepted-str"),
    R(accept(1), ValueError, "accepted must be None or a sequence of integers, got 1",
      id="accepted-scalar"),
    R(lambda s, plan: s.postprocess(None), ValueError, "plan was not made by this scheduler",
      id="postprocess-None"),
    R(lambda s, plan: s.schedule(phase=1), ValueError, "phase must be prompt or decode, got 1",
      id="phase-int"),
    R(lambda s, plan: s.seq(True), ValueError, "seq_id must be an integer, got True", id="seq-bool"),
    R(lambda s, plan: s.seq(0.0), ValueError, "seq_id must be an integer, got 0.0", id="seq-float"),
    R(lambda s, plan: s.seq(2**64), ValueError,
      "seq_id must be a 64-bit integer, got 18446744073709551616", id="seq-beyond-int64"),
    R(lambda s, plan: s.num_free_blocks(True), ValueError, "rank must be an integer, got True",
      id="rank-bool"),
    R(lambda s, plan: s.num_free_blocks(-1), ValueError, "rank -1 is outside 0..0", id="rank-negative"),
    R(lambda s, plan: s.num_free_blocks(2**40), ValueError, "rank 1099511627776 is outside 0..0",
      id="rank-beyond-int32"),
    R(lambda s, plan: s.refcount(1.0), ValueError, "block must be an integer, got 1.0", id="block-float"),
    R(lambda s, plan: s.refcount(-1), ValueError, "block -1 is outside 0..1023", id="block-negative"),
    R(lambda s, plan: s.refcount(2**40), ValueError, "block 1099511627776 is outside 0..1023",
      id="block-beyond-int32"),
    R(lambda s, plan: s.refcount(0, rank=3), ValueError, "rank 3 is outside 0..0", id="refcount-rank"),
]


def state(s):
    """What a refused call must leave as it was."""
    seq = s.seq(0)
    return ((seq.num_tokens, seq.num_cached, seq.num_inflight, list(seq.blocks)),
            s.num_free_blocks(0), s.num_outstanding_plans, s.is_finished())


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("call, error, words", REFUSALS)
def test_python_api_refusals_change_nothing(impl, call, error, words):
    s, plan = ready(impl)
    before = state(s)
    with pytest.raises(error, match=re.escape(words)):
        call(s, plan)
    assert state(s) == before
    with pytest.raises(ValueError, match="unknown seq_id 5"):
        s.seq(5)
    s.postprocess(plan, [2])  # the plan is still outstanding and can be post-processed
    assert s.seq(0).num_tokens == 8


@pytest.mark.parametrize("impl", IMPLS)
def test_integer_like_arguments_still_pass(impl):
    s = make_scheduler(impl)
    s.add_sequence(seq_id=np.int64(0), prompt_len=np.int32(32), max_new_tokens=np.uint8(2),
                   arrival_time=np.float32(0.5), hash_ids=np.array([3, 4], dtype=np.uint64))
    s.add_sequence(seq_id=1, prompt_len=4, max_new_tokens=1, arrival_time=3, hash_ids=())
    c = make_scheduler(impl, engine_type="completion")
    c.add_sequence(seq_id=0, prompt_len=4, max_new_tokens=2, kv_transfer=np.True_)
    c.kv_arrived(np.int64(0))
    assert s.seq(np.int64(0)).prompt_len == 32 and s.seq(1).arrival_time == 3.0
    assert s.num_free_blocks(np.int8(0)) == 1024


# ---- A request longer than a sequence can hold is rejected; the run goes on ----------------

def drain(s):
    """Plan and post-process until finished: (ids in plan.rejected, the records that left)."""
    rejected, left = [], {}
    for _ in range(1000):
        if s.is_finished():
            break
        plan = s.schedule()
        rejected += plan.rejected.tolist()
        left.update((r.seq_id, r) for r in s.postprocess(plan).left)
    assert s.is_finished()
    return rejected, left


def too_long(needs):
    return (f"needs {needs} tokens (prompt_len + max(max_new_tokens, lookahead)) but a "
            f"sequence holds at most {MAX_SEQ_TOKENS}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("engine_type", ENGINE_TYPES)
@pytest.mark.parametrize("prompt_len, max_new_tokens", [
    (3 * 10**9, 3), (MAX_SEQ_TOKENS - 9, 10)], ids=["3e9-prompt", "one-token-over"])
def test_a_request_longer_than_a_sequence_holds_is_rejected_and_the_run_goes_on(
        impl, engine_type, prompt_len, max_new_tokens):
    s = make_scheduler(impl, engine_type=engine_type)
    make_requests(s, (4, 3))
    added = s.add_sequence(seq_id=1, prompt_len=prompt_len, max_new_tokens=max_new_tokens)
    reason = too_long(prompt_len + max_new_tokens)
    assert (added.status, added.reason) == ("rejected", reason)
    assert added.output_len == (1 if engine_type == "completion" else 0)
    assert s.seq(1).prompt_len == 0 and s.seq(1).blocks == []  # lengths not kept: no fit in 32 bits
    make_requests(s, (5, 2), start_id=2)
    rejected, left = drain(s)
    assert rejected == [1] and left[1].status == "rejected" and left[1].reason == reason
    assert {left[i].status for i in (0, 2)} == {"finished"}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("engine_type", ENGINE_TYPES)
def test_the_limit_counts_the_lookahead(impl, engine_type):
    s = make_scheduler(impl, engine_type=engine_type, lookahead_slots=MAX_SEQ_TOKENS - 5)
    assert s.add_sequence(seq_id=0, prompt_len=10, max_new_tokens=2).reason == \
        too_long(MAX_SEQ_TOKENS + 5)


@pytest.mark.parametrize("impl", IMPLS)
def test_the_longest_request_a_sequence_holds_is_not_too_long(impl):
    s = make_scheduler(impl, block_size=2**20, num_kv_blocks=1024)  # the pool holds 2**30 tokens
    assert s.add_sequence(seq_id=0, prompt_len=MAX_SEQ_TOKENS - 1, max_new_tokens=1).status == "waiting"
    assert s.add_sequence(seq_id=1, prompt_len=MAX_SEQ_TOKENS, max_new_tokens=1).reason == \
        too_long(MAX_SEQ_TOKENS + 1)


def test_lengths_whose_sum_overflows_int64_are_rejected_not_a_crash():
    out = in_subprocess("""
        from tests.helpers import make_scheduler
        for impl in ("cpp", "reference"):
            s = make_scheduler(impl)
            for i, (p, m) in enumerate([(2**62, 2**62), (2**63 - 1, 2**63 - 1), (1, 2**63 - 1)]):
                r = s.add_sequence(seq_id=i, prompt_len=p, max_new_tokens=m)
                print(impl, r.status, r.reason.split(" tokens")[0])
    """)
    assert out.splitlines() == [f"{impl} rejected needs {n}" for impl in IMPLS
                                for n in (2**63, 2**64 - 2, 2**63)]


def test_a_modeled_run_rejects_the_oversized_request_and_finishes_the_others(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,max_new_tokens\n0.0,10,3\n0.001,3000000000,3\n"
                     "0.002,12,2\n0.003,4503599627370496,4503599627370496\n0.004,9,4\n")
    workload = tmp_path / "w.yaml"
    workload.write_text(f"output: {tmp_path / 'results'}\ntrace: {{file: {trace}}}\n"
                        "engine: {max_num_batched_tokens: 256, num_kv_blocks: 256}\n"
                        "model: deepseek-v3\ndevice: modeled:H200\nprecision: fp8\n"
                        "deployment: {devices: 8, attention: {tp: 8}, dense: {tp: 8}}\n")
    (run,) = run_workload(load_workload(workload))
    run_dir = run.path
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"]
    requests = read_requests(run_dir / "requests.parquet").set_index("request_id")
    assert requests["status"].tolist() == ["finished", "rejected", "finished", "rejected", "finished"]
    assert requests.loc[1, "reason"] == too_long(3 * 10**9 + 3)
    assert requests.loc[3, "reason"] == too_long(2**53)  # 2**52 each: counts the reader holds exactly
    assert requests.loc[[0, 2, 4], "output_tokens"].tolist() == [3, 2, 4]
    assert requests.loc[[1, 3], "output_tokens"].tolist() == [0, 0]


# ---- Threads: calls into one Scheduler are serialised ---------------------------------------

def test_threads_sharing_a_scheduler_are_serialised():
    """Two threads plan (schedule() releases the GIL), one post-processes in plan order, one
    adds requests and reads the scheduler back, all at once. Without the scheduler's mutex
    this ends in a segfault or "double free or corruption" in most of its rounds."""
    out = in_subprocess("""
        import threading
        from engine import Scheduler, SchedulerConfig

        cfg = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=512,
                              num_kv_blocks=2048, block_size=4)
        n = rounds = 3000

        def serve():
            s = Scheduler(cfg, retain_finished=False)
            plans, ready, left = {}, threading.Condition(), []
            depth = threading.Semaphore(4)  # plans outstanding at once: work in every plan

            def add():
                for i in range(n):
                    s.add_sequence(seq_id=i, prompt_len=1 + i % 37, max_new_tokens=1 + i % 61,
                                   hash_ids=[i % 3] if i % 2 else None)
                    s.num_free_blocks(0), s.is_finished(), s.num_outstanding_plans, s.num_live

            def plan():
                for _ in range(rounds):
                    depth.acquire()
                    p = s.schedule()
                    with ready:
                        plans[p.step] = p
                        ready.notify_all()

            def commit():
                for step in range(2 * rounds):
                    with ready:
                        ready.wait_for(lambda: step in plans)
                        p = plans.pop(step)
                    left.extend(s.postprocess(p).left)
                    depth.release()

            threads = [threading.Thread(target=f) for f in (add, plan, plan, commit)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            while not s.is_finished() or s.num_outstanding_plans:
                left.extend(s.postprocess(s.schedule()).left)
            assert sorted((r.seq_id, r.output_len) for r in left) == \
                [(i, 1 + i % 61) for i in range(n)]
            return s.num_free_blocks(0), s.num_live

        print([serve() for _ in range(4)])
    """, timeout_s=60)
    assert out.strip() == str([(2048, 0)] * 4)


def test_a_call_waits_for_a_schedule_running_in_another_thread():
    """A query made while another thread is inside a GIL-released schedule() returns only
    once that schedule() is done: no second call starts inside its window."""
    n = 100_000
    schedulers = []
    for _ in range(3):
        s = make_scheduler(max_num_batched_tokens=n, max_num_seqs=n, num_kv_blocks=n)
        for i in range(n):
            s.add_sequence(seq_id=i, prompt_len=1, max_new_tokens=1)
        schedulers.append(s)
    calls, stop = [], threading.Event()
    current = [schedulers[0]]

    def query():
        while not stop.is_set():
            start = time.perf_counter_ns()
            current[0].num_free_blocks(0)
            calls.append((start, time.perf_counter_ns()))

    thread = threading.Thread(target=query)
    thread.start()
    windows = []
    try:
        for s in schedulers:
            current[0] = s
            plan = s.schedule()  # a long prompt round, the GIL released
            windows.append((plan.sched_start_ns, plan.sched_start_ns + plan.sched_ns))
    finally:
        stop.set()
        thread.join()
    inside = [[(a, b) for a, b in calls if start < a < end] for start, end in windows]
    assert any(inside), f"no query began inside a schedule() window {windows}"
    for (start, end), began in zip(windows, inside):
        assert len(began) <= 1 and all(b > end for _, b in began), (start, end, began)


# ---- Bound objects check what they are handed -------------------------------------------------

def test_a_step_log_refuses_records_of_another_scheduler():
    """A StepLog fed by one engine refuses another engine's step record and add record with
    a ValueError (in a fresh interpreter: a regression here used to be a segfault)."""
    out = in_subprocess("""
        from engine import EngineConfig, LLMEngine, SchedulerConfig, _core

        def engine():
            return LLMEngine(EngineConfig(
                scheduler=SchedulerConfig(max_num_batched_tokens=256, num_kv_blocks=64),
                model="deepseek-v3", executor="modeled:h200"))

        def records(e):
            added = [e.add_request(i, prompt_len=20 + i, max_new_tokens=3) for i in range(4)]
            steps = []
            while e.has_unfinished():
                steps.append(e.step())
            return added, steps

        (added, mine), (theirs_added, theirs) = records(engine()), records(engine())
        log = _core.StepLog(0, 2, lambda: None)
        for a in added:
            log.enqueue(a, 0.0)
        log.record(mine[0], 0.0, 1.0)
        for call in (lambda: log.record(theirs[1], 1.0, 2.0),
                     lambda: log.enqueue(theirs_added[0], 1.0)):
            try:
                call()
            except ValueError as e:
                print(e)
        for k, r in enumerate(mine[1:], 1):
            log.record(r, k, k + 1.0)
        log.end()
        print(sorted(log.take_requests()["status"].tolist()))
    """)
    assert out.splitlines() == [
        "plan 1 comes from another scheduler than the requests and plans recorded before it",
        "request 0 was added to another scheduler than the requests and plans recorded before it",
        "[0, 0, 0, 0]"]


def test_a_step_log_records_one_step_at_a_time():
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=256,
                                                              num_kv_blocks=64),
                                    model="deepseek-v3", executor="modeled:h200"))
    engine.add_request(0, prompt_len=20, max_new_tokens=3)
    records = [engine.step() for _ in range(3)]
    errors = []

    def on_full():  # calls back into the log while its record() is running
        try:
            log.record(records[2], 2.0, 3.0)
        except RuntimeError as e:
            errors.append(str(e))

    log = _core.StepLog(0, 1, on_full)
    log.record(records[0], 0.0, 1.0)
    log.record(records[1], 1.0, 2.0)  # one step buffered: on_full first
    assert errors == ["StepLog.record() called while another record() of this log is running "
                      "(from on_full or another thread): a StepLog records one step at a time"]
    assert log.take_steps()["step"].tolist() == [0, 1]
