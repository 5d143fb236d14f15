"""Bad arguments raise ValueError naming the value, and change nothing in the scheduler."""

import numpy as np
import pytest

from engine import SchedulerConfig
from tests.helpers import IMPLS, make_requests, make_scheduler


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


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_phase(impl):
    with pytest.raises(ValueError, match="phase must be prompt or decode, got 'both'"):
        make_scheduler(impl).schedule(phase="both")
    with pytest.raises(ValueError, match="a prompt engine cannot run a decode round"):
        make_scheduler(impl, engine_type="prompt").schedule(phase="decode")
    with pytest.raises(ValueError, match="a completion engine cannot run a prompt round"):
        make_scheduler(impl, engine_type="completion").schedule(phase="prompt")
