"""One decode batch's FLOPs and bytes: CostModel.batch (C++) and calc_flops (the Python
reference) side by side, on deepseek-v3.

Run: pytest tests/bench/test_cost_model_bench.py --benchmark-enable --benchmark-group-by=param:n
In the ordinary test run (benchmarks disabled) each case runs once as a smoke test.
"""

import numpy as np
import pytest

from engine import FlopsEstimator, load_model_config
from tests.bench.test_decode_round import PROMPT_LEN, decode_ready

IMPLS = ("cpp", "python")
ROUNDS = {"cpp": (200, 100), "python": (50, 1)}  # (rounds, iterations per round)


@pytest.mark.parametrize("n", [64, 1024])
@pytest.mark.parametrize("impl", IMPLS)
def test_cost_model(benchmark, impl, n):
    plan = decode_ready("cpp", n).schedule()
    batch = plan.batches[0]
    accepted = np.zeros(n, np.int64)  # what the modeled executor passes without MTP
    est = FlopsEstimator(load_model_config("deepseek-v3"))
    if impl == "cpp":
        cost, args = est.cost_model().batch, (batch, accepted, False)
    else:
        def cost(b, a):
            return est.calc_flops(b.seqlen_q, b.seqlen_k, kind=b.kind, padded_q=b.padded_q,
                                  accepted=a)
        args = (batch, accepted)
    benchmark.extra_info.update(impl=impl, n=n, model="deepseek-v3", seqlen_k=PROMPT_LEN + 1)
    rounds, iterations = ROUNDS[impl]
    got = benchmark.pedantic(cost, args=args, rounds=rounds, iterations=iterations,
                             warmup_rounds=1)
    assert got.model_flops > 0 and (batch.seqlen_q == 1).all() and len(batch) == n
