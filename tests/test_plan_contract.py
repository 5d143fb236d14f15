"""Both schedulers' plans, batches, postprocess results and sequence records against the
Protocols of engine/plan.py, at run time: every member present, of its declared kind (an
int, a bool, a str, a numpy array of its dtype, a sequence of a contract). mypy checks the
same structurally (engine/plan.py's `_conforms`)."""

import typing
from collections.abc import Sequence

import numpy as np
import pytest

from engine import plan as contracts
from engine.plan import BatchContract, PlanContract, PostprocessContract, SeqRecordContract
from tests.helpers import make_scheduler

pytestmark = pytest.mark.core


def members(contract):
    """{name: declared type} of a Protocol's members (its read-only properties)."""
    return {name: typing.get_type_hints(value.fget, vars(contracts))["return"]
            for name, value in vars(contract).items() if isinstance(value, property)}


def check(value, declared, where):
    origin, args = typing.get_origin(declared), typing.get_args(declared)
    if origin is np.ndarray:
        dtype = np.dtype(typing.get_args(args[1])[0])
        assert isinstance(value, np.ndarray) and value.dtype == dtype, \
            f"{where}: {type(value).__name__} {getattr(value, 'dtype', '')}, declared {dtype}"
    elif origin is Sequence:
        assert isinstance(value, Sequence), f"{where}: {type(value).__name__} is no sequence"
        for i, item in enumerate(value):
            conforms(item, args[0], f"{where}[{i}]")
    elif declared is int:  # a Python int, not a bool
        assert type(value) is int, f"{where}: {value!r} is a {type(value).__name__}, not int"
    else:
        assert type(value) is declared, f"{where}: {value!r} is not a {declared.__name__}"


def conforms(obj, contract, where):
    declared = members(contract)
    assert declared, contract  # a Protocol with no members would check nothing
    for name, kind in declared.items():
        assert hasattr(obj, name), f"{where}: {type(obj).__name__} has no {name}"
        check(getattr(obj, name), kind, f"{where}.{name}")


def test_the_contracts_name_what_the_tables_and_executors_read():
    assert {"seq_ids", "seqlen_q", "seqlen_k", "kind", "block_tables", "kv_blocks_free",
            "num_retained_blocks"} <= set(members(BatchContract))
    assert {"step", "phase", "batches", "preempted", "rejected", "sched_ns"} <= \
        set(members(PlanContract))
    assert set(members(PostprocessContract)) == {"step", "finished", "discarded_tokens",
                                                 "output_len", "left"}
    assert "status" in members(SeqRecordContract)


@pytest.mark.parametrize("impl", ["cpp", "ref"])
def test_every_plan_meets_the_contract(impl):
    """Prompt and decode rounds on two DP ranks, with a rejection, preemptions and
    finished sequences, each plan and postprocess result checked whole."""
    sched = make_scheduler(impl, dp_size=2, num_kv_blocks=12, max_num_batched_tokens=64)
    added = [sched.add_sequence(seq_id=i, prompt_len=40 + 7 * i, max_new_tokens=30)
             for i in range(6)]
    added.append(sched.add_sequence(seq_id=6, prompt_len=10**4, max_new_tokens=1))
    for i, record in enumerate(added):
        conforms(record, SeqRecordContract, f"{impl} add_sequence({i})")
    seen = set()
    while not sched.is_finished():
        plan = sched.schedule()
        conforms(plan, PlanContract, f"{impl} plan {plan.step}")
        for b in plan.batches:
            assert b.block_tables.ndim == 2 and len(b.block_tables) == len(b.seq_ids)
        post = sched.postprocess(plan)
        conforms(post, PostprocessContract, f"{impl} postprocess {plan.step}")
        seen |= {plan.phase} | {name for name, happened in (
            ("preempted", len(plan.preempted)), ("rejected", len(plan.rejected)),
            ("left", len(post.left))) if happened}
    assert seen == {"prompt", "decode", "preempted", "left", "rejected"}, seen
