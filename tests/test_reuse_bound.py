"""The reuse bound of `steptrace trace stats` against the cache it bounds: on the bundled
conversation trace, with a pool that holds every block and every request finished before
the next arrives, the scheduler's hit tokens equal the bound exactly, at engine blocks
smaller and larger than the trace's hash block."""

import json

import numpy as np
import pandas as pd
import pytest

from engine import Scheduler, SchedulerConfig
from harness.commands import main
from harness.replay.driver import Requests, replay
from harness.replay.sched_replay import SchedulerStepper
from harness.traces.read import read_trace
from harness.traces.reuse import reuse_bound
from tests.helpers import REPO

pytestmark = pytest.mark.core

TRACE = REPO / "workloads" / "traces" / "conversation_small.jsonl"


class HitCounter:
    """The replay's recorder: sums every plan's prefix-hit tokens."""

    def __init__(self):
        self.hit_tokens = 0
        self.num_done = 0

    def enqueue(self, added, t):
        pass

    def step(self, record, t_start, t_end):
        self.hit_tokens += sum(b.num_hit_tokens for b in record.plan.batches)


@pytest.mark.parametrize("block_size", [64, 1024])
def test_hits_equal_the_reuse_bound_with_an_ample_pool_and_spread_arrivals(block_size):
    trace = read_trace(TRACE)
    hash_block = trace.hash_block_size
    # The first 120 requests, two output tokens each: hits depend on prompts alone, and a
    # sanitizer build checks the whole pool after every step.
    df = trace.df.head(120).assign(max_new_tokens=2)
    tokens = int((df["prompt_len"] + df["max_new_tokens"]).sum())
    config = SchedulerConfig(block_size=block_size, num_kv_blocks=2 * tokens // block_size,
                             max_num_batched_tokens=16384)
    sched = Scheduler(config)
    counter = HitCounter()
    # 1,000 s apart and 1 ms a step: each request is done long before the next arrives.
    requests = Requests(np.arange(len(df)) * 1000.0, df["prompt_len"].to_numpy(),
                        df["max_new_tokens"].to_numpy(), df["hash_ids"].to_numpy(object),
                        hash_block)
    replay(SchedulerStepper(sched, False, 1e-3, len(df)), requests, "virtual", counter,
           step_seconds=lambda record: record.step_s)
    bound = reuse_bound(df, hash_block, block_size)
    assert sched.is_finished() and bound["reuse_tokens"] > 0
    assert counter.hit_tokens == bound["reuse_tokens"]


def test_trace_stats_prints_the_reuse_bound(capsys):
    assert main(["trace", "stats", str(TRACE), "--block-size", "64", "--json"]) == 0
    reuse = json.loads(capsys.readouterr().out)["reuse"]
    assert reuse["block_size"] == 64 and 0 < reuse["reuse_bound"] < 1
    assert reuse["reuse_tokens"] == pytest.approx(reuse["reuse_bound"] * reuse["prompt_tokens"])


def test_trace_stats_refuses_a_block_size_the_hash_block_does_not_fit(capsys):
    assert main(["trace", "stats", str(TRACE), "--block-size", "100"]) == 2
    assert "hash block size 512 and block_size 100: one must divide the other" \
        in capsys.readouterr().err


def test_the_bound_by_hand():
    # Blocks of 4: B repeats A's first block then differs; C is A whole (its last block is
    # computed again: 1 of its 2 blocks); D has no hash ids.
    df = pd.DataFrame(dict(prompt_len=[8, 8, 8, 5],
                           hash_ids=[[1, 2], [1, 3], [1, 2], None]))
    assert reuse_bound(df, 4) == dict(reuse_bound=8 / 29, reuse_tokens=8, prompt_tokens=29,
                                      block_size=4)
