"""One decode round (schedule + metadata export + postprocess), C++ and reference side by side.

Run: pytest tests/bench --benchmark-enable --benchmark-group-by=param:n
In the ordinary test run (benchmarks disabled) each case runs once as a smoke test.
"""

import statistics
import time

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


# The N = 1,024 round: the C++ core at least this many times faster than the reference.
TARGET_RATIO = 250
RATIO_N = 1024
CPP_PER_REFERENCE = 10


def test_decode_round_ratio(benchmark):
    """Both sides in one run, interleaved (ten C++ rounds per reference round), so that a
    busy spell of a shared host falls on both; the ratio of the medians is asserted. Runs
    only with benchmarks enabled (the cases above smoke-test the round)."""
    if benchmark.disabled:
        pytest.skip("a benchmark: run with --benchmark-enable")
    cpp, ref = decode_ready("cpp", RATIO_N), decode_ready("reference", RATIO_N)
    decode_round(cpp), decode_round(ref)
    cpp_ns, ref_ns = [], []

    def block():
        start = time.perf_counter_ns()
        decode_round(ref)
        ref_ns.append(time.perf_counter_ns() - start)
        for _ in range(CPP_PER_REFERENCE):
            start = time.perf_counter_ns()
            decode_round(cpp)
            cpp_ns.append(time.perf_counter_ns() - start)

    benchmark.pedantic(block, rounds=ROUNDS["reference"], iterations=1, warmup_rounds=0)
    cpp_us, ref_us = statistics.median(cpp_ns) / 1e3, statistics.median(ref_ns) / 1e3
    ratio = ref_us / cpp_us
    benchmark.extra_info.update(n=RATIO_N, cpp_median_us=round(cpp_us, 2),
                                reference_median_us=round(ref_us, 1), ratio=round(ratio))
    print(f"\nN = {RATIO_N}: C++ {cpp_us:.2f} us, reference {ref_us:.0f} us, {ratio:.0f}x")
    assert ratio >= TARGET_RATIO, f"C++ {cpp_us:.2f} us is only {ratio:.0f}x the reference"
