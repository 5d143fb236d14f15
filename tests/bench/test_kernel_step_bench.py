"""One modeled deployment step (ModeledStep.execute: the C++ DeploymentModel) timed from
kernel tables and from rooflines, side by side in one run, on one DP rank of DeepSeek-V3
over 8 B200s decoding N sequences: the tables' lookups are a few per kernel, so a step
costs a few microseconds more than a roofline's (docs/modeling.md, "The step from kernel
tables"; the target is <= 5 us more).

Run: pytest tests/bench/test_kernel_step_bench.py --benchmark-enable
In the ordinary test run (benchmarks disabled) each case runs once as a smoke test.
"""

import pytest

from engine import EngineConfig, SchedulerConfig
from engine.deployment import Deployment
from engine.devices import load_device_profile
from engine.executors.modeled import ModeledExecutor
from engine.flops import FlopsEstimator
from engine.model_config import load_model_config
from tests.bench.test_decode_round import decode_ready

FP4 = dict(attention="bf16", kv="fp8", dense="fp4", experts="fp4", dispatch="fp8",
           combine="bf16")


def executor(stack):
    d = Deployment(devices=8, attention_dp=1, attention_tp=8, moe_ep=8, precision=dict(FP4),
                   stack=stack)
    cfg = EngineConfig(scheduler=SchedulerConfig(dp_size=1), model="deepseek-v3",
                       executor="modeled:B200", precision="fp4", deployment=d)
    est = FlopsEstimator(load_model_config("deepseek-v3"), weight_bytes=0.5,
                         expert_weight_bytes=0.5, kv_bytes=1.0)
    return ModeledExecutor(cfg, est, load_device_profile("B200"))


@pytest.mark.parametrize("n", [64, 512])
@pytest.mark.parametrize("stack", ["trtllm", "roofline"])
def test_modeled_step(benchmark, stack, n):
    plan = decode_ready("cpp", n).schedule()
    step = executor(stack).core
    benchmark.extra_info.update(stack=stack, n=n, model="deepseek-v3", device="B200")
    seconds, costs, _ = benchmark.pedantic(step.execute, args=(plan,), rounds=2000,
                                           iterations=1, warmup_rounds=10)
    assert seconds > 0 and costs[0].attention_s > 0
