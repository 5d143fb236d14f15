"""The modeled executor: roofline step times on a device profile, no forward."""

import re

import numpy as np
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig, load_device_profile
from engine.deployment import Deployment
from engine.devices.profile import DEVICES_DIR

pytestmark = pytest.mark.core


def modeled_engine(device="h200", model="deepseek-v3", precision="bf16", seed=0, **sched):
    cfg = EngineConfig(scheduler=SchedulerConfig(**{**dict(max_num_batched_tokens=8192,
                                                          num_kv_blocks=4096, block_size=64),
                                                    **sched}),
                       model=model, executor=f"modeled:{device}", precision=precision, seed=seed)
    return LLMEngine(cfg)


def test_decode_step_lasts_what_the_roofline_says():
    engine = modeled_engine()
    engine.add_request(0, prompt_len=4095, max_new_tokens=4)
    engine.step()  # prefill
    record = engine.step()  # one decode token at seqlen_k 4096
    h200 = load_device_profile("H200")
    f = engine.estimator.calc_flops(np.array([1]), np.array([4096]), phase="decode")
    compute = f.executed_flops / (989e12 * h200.compute_efficiency.value)
    memory = f.bytes / (4.8e12 * h200.memory_efficiency.value)
    assert memory > compute  # one decode token is bandwidth-bound
    expected = h200.step_overhead_us.value * 1e-6 + memory
    assert record.modeled and record.forward_ns == pytest.approx(expected * 1e9, rel=1e-6)
    assert record.model_flops.sum() == pytest.approx(f.model_flops)


def test_same_seed_same_records():
    runs = []
    for _ in range(2):
        engine = modeled_engine(num_mtp=1, overlap=True)
        for i in range(20):
            engine.add_request(i, prompt_len=100 + 10 * i, max_new_tokens=5 + i)
        runs.append([(r.phase, r.forward_ns, r.executed_flops.tolist(), r.finished.tolist())
                     for r in engine.run()])
    assert runs[0] == runs[1]


def test_unpublished_peak_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="Ascend 950PR: no published dense bf16 peak"):
        modeled_engine(device="ascend-950pr")
    engine = modeled_engine(device="ascend-950pr", precision="fp8", model="deepseek-v4-flash")
    engine.add_request(0, prompt_len=2048, max_new_tokens=2)
    assert all(r.modeled and r.forward_ns > 0 for r in engine.run())


@pytest.mark.parametrize("figure, deployment", [("hbm_tb_s", None),
                                                 ("interconnect_gb_s", Deployment())])
def test_an_unpublished_bandwidth_is_an_error_naming_it(tmp_path, figure, deployment):
    text = (DEVICES_DIR / "h200.yaml").read_text()
    path = tmp_path / "h200-unpublished.yaml"
    path.write_text(re.sub(rf"(?m)^{figure}:.*$", f"{figure}: null", text))
    cfg = EngineConfig(executor=f"modeled:{path}", model="deepseek-v3", deployment=deployment,
                       scheduler=SchedulerConfig(num_kv_blocks=4096))
    with pytest.raises(ValueError, match=f"H200: no published {figure}"):
        LLMEngine(cfg)


def test_modeled_runs_generate_no_tokens():
    engine = modeled_engine()
    engine.add_request(0, prompt_len=10, max_new_tokens=3)
    with pytest.raises(ValueError, match="generates no tokens"):
        engine.tokens(0)
