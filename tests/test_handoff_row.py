"""A P/D request's one requests row, written by the step logs of one process (the modeled
loops, csrc/recorder/step_log.hpp): a prefill instance's log keeps each request it hands off
until a decode instance's log takes it in, which writes the joined row
(docs/disaggregation.md, "What is recorded"); at the end, those no decode instance took in
are unfinished between the pools. The P/D columns the replay never filled in are the
schema's missing values."""

import math

import numpy as np
import pytest

from engine import _core
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.scheduler_config import SchedulerConfig
from harness.schema.tables import PD_COLUMNS, REQUESTS
from harness.schema.values import AWAITING_DECODE_ROOM, IN_KV_TRANSFER, STRANDED_REASONS

pytestmark = pytest.mark.core

STATUS = REQUESTS.column("status")
MISSING = {c.name: c.missing for c in PD_COLUMNS}


def engine(engine_type, dp_size=1):
    return LLMEngine(EngineConfig(model="tiny", executor="modeled:H800", scheduler=SchedulerConfig(
        engine_type=engine_type, max_num_batched_tokens=512, num_kv_blocks=64, block_size=16,
        dp_size=dp_size)))


def drain(e, log, t0=0.0):
    """Steps the engine until it holds nothing, each step recorded as 1 s long."""
    t = t0
    while e.has_unfinished():
        record = e.step()
        if record is not None:
            log.record(record, t, t + 1.0)
            t += 1.0
    return t


def rows(log):
    r = log.take_requests()
    order = np.argsort(r["request_id"])
    return {name: np.asarray(column)[order].tolist() for name, column in r.items()}


def same(a, b):
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


@pytest.fixture
def handed():
    """Requests 0, 1 and 2 prefilled on prefill instance 1 (DP rank 1 for request 1) and
    handed off; request 3 rejected there."""
    prefill = engine("prompt", dp_size=2)
    log = _core.StepLog(0, 10**6, lambda: None, handoff="kept", instance=1)
    for i, p in enumerate((40, 24, 8, 10**7)):
        log.enqueue(prefill.add_request(i, prompt_len=p, max_new_tokens=3, arrival_time=0.5),
                    0.5)
    drain(prefill, log, 1.0)
    return log


def test_a_kept_log_writes_no_row_for_what_it_handed_off(handed):
    got = rows(handed)
    assert got["request_id"] == [3]  # the rejected one: its row, the prefill instance's
    assert got["status"] == [STATUS.code("rejected")]
    assert (got["prefill_instance"], got["decode_instance"], got["decode_dp_rank"]) == \
        ([1], [-1], [-1])
    assert all(same(got[name][0], MISSING[name]) for name in MISSING
               if name != "prefill_instance")
    assert handed.handed(0).prefill_instance == 1
    with pytest.raises(IndexError):
        handed.handed(3)


def test_the_decode_log_writes_the_joined_row(handed):
    decode = engine("completion")
    log = _core.StepLog(0, 10**6, lambda: None)
    handed.set_handed(0, decode_instance=0, kv_bytes=1e6, handoff_s=2.0)
    handed.set_handed(0, transfer_start_s=2.5, transfer_end_s=4.0, decode_wait_s=0.5)
    assert handed.handed(0).kv_bytes == 1e6
    with pytest.raises(TypeError, match="no P/D column"):
        handed.set_handed(0, kv_byte=1.0)
    added = decode.add_request(0, prompt_len=40, max_new_tokens=3, arrival_time=2.0,
                               kv_transfer=True)
    decode.kv_arrived(0)
    log.enqueue(added, 4.0, handed_by=handed)
    with pytest.raises(IndexError):
        handed.handed(0)  # taken in: the decode log writes its row
    with pytest.raises(ValueError, match="was not handed off"):
        log.enqueue(decode.add_request(3, prompt_len=8, max_new_tokens=3), 4.0,
                    handed_by=handed)
    end = drain(decode, log, 10.0)
    log.end()
    got = {name: column[0] for name, column in rows(log).items()}
    # the prefill's: arrival to first schedule, its rank and prefix hits
    assert (got["enqueue_s"], got["first_scheduled_s"], got["first_scheduled_step"],
            got["dp_rank"]) == (0.5, 1.0, 0, 0)
    # the decode's: the first token with the KV, the rest of the tokens, how it ended
    assert (got["first_token_s"], got["output_tokens"], got["status"]) == \
        (4.0, 3, STATUS.code("finished"))
    assert 10.0 < got["last_token_s"] <= end
    assert (got["prefill_instance"], got["decode_instance"], got["decode_dp_rank"]) == (1, 0, 0)
    assert (got["kv_bytes"], got["handoff_s"], got["transfer_start_s"], got["transfer_end_s"],
            got["decode_wait_s"]) == (1e6, 2.0, 2.5, 4.0, 0.5)


def test_what_no_decode_instance_took_in_is_unfinished_between_the_pools(handed):
    rows(handed)  # the rejected one's
    handed.set_handed(1, transfer_start_s=3.0, decode_instance=0)
    handed.end()
    got = rows(handed)
    assert got["request_id"] == [0, 1, 2]
    # the reasons declared once (harness/schema/values.py), exactly
    assert got["reason"] == [AWAITING_DECODE_ROOM, IN_KV_TRANSFER, AWAITING_DECODE_ROOM]
    assert set(got["reason"]) == set(STRANDED_REASONS)
    assert got["status"] == [STATUS.code("unfinished")] * 3
    assert got["output_tokens"] == [0] * 3 and all(math.isnan(t) for t in got["first_token_s"])
    assert got["enqueue_s"] == [0.5] * 3 and got["dp_rank"] == [0, 1, 0]
    assert got["decode_instance"] == [-1, 0, -1] and got["decode_dp_rank"] == [-1] * 3
    assert same(got["transfer_end_s"][1], MISSING["transfer_end_s"])
