"""One decode round (schedule + metadata export + postprocess), C++ and reference side by side.

Run: pytest tests/bench --benchmark-enable --benchmark-group-by=param:n
In the ordinary test run (benchmarks disabled) each case runs once as a smoke test.
"""

import pytest

from tests.helpers import IMPLS, make_scheduler

PROMPT_LEN = 1024
ROUNDS = {"cpp": 500, "reference": 50}


def decode_ready(impl, n):
    """n sequences, prefilled and decoding; they never finish within a benchmark."""
    s = make_scheduler(impl, max_num_batched_tokens=PROMPT_LEN * n, max_num_seqs=n,
                       num_kv_blocks=n * 64, block_size=64)
    for i in range(n):
        s.add_sequence(seq_id=i, prompt_len=PROMPT_LEN, max_new_tokens=100_000)
    s.postprocess(s.schedule())
    return s


def decode_round(s):
    plan = s.schedule()
    batch = plan.batches[0]
    exported = (batch.seq_ids, batch.seqlen_q, batch.seqlen_k, batch.block_tables)
    s.postprocess(plan)
    return exported


@pytest.mark.parametrize("n", [64, 256, 1024])
@pytest.mark.parametrize("impl", IMPLS)
def test_decode_round(benchmark, impl, n):
    s = decode_ready(impl, n)
    decode_round(s)  # warm-up: the first round sorts the running list
    benchmark.extra_info.update(impl=impl, n=n, prompt_len=PROMPT_LEN, block_size=64)
    seq_ids, seqlen_q, seqlen_k, tables = benchmark.pedantic(
        decode_round, args=(s,), rounds=ROUNDS[impl], iterations=1, warmup_rounds=0)
    assert len(seq_ids) == n and (seqlen_q == 1).all() and tables.shape[0] == n
