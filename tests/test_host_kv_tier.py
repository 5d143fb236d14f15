"""The host KV tier on both schedulers, hand-computed (docs/scheduling.md, "Prefix caching"):
evicted blocks go to the host tier, a later prefix hit reloads them, and a modeled step pays
each reload's bytes over the device profile's host link."""

from dataclasses import replace

import numpy as np
import pytest

from engine import LLMEngine, SchedulerConfig, _core
from engine.config import EngineConfig
from engine.deployment import Deployment
from engine.device_memory import kv_bytes_per_token
from engine.devices import load_device_profile
from engine.executors.modeled import reload_s_per_block
from engine.flops import FlopsEstimator
from engine.model_config import load_model_config
from tests.helpers import IMPLS, make_scheduler, rows

pytestmark = pytest.mark.core


def admit(s, seq_id, prompt_len, hash_ids):
    """Add one prompt-engine sequence and run the round that admits (and hands off) it."""
    s.add_sequence(seq_id=seq_id, prompt_len=prompt_len, max_new_tokens=1, hash_ids=hash_ids)
    plan = s.schedule()
    s.postprocess(plan)
    return plan


def evicted_context(impl, host_kv_blocks):
    """A's three blocks, then C, which takes the pool's six and so evicts A's."""
    s = make_scheduler(impl, block_size=4, num_kv_blocks=6, engine_type="prompt",
                       host_kv_blocks=host_kv_blocks, max_num_batched_tokens=32)
    admit(s, 0, 12, [1, 2, 3])
    assert admit(s, 1, 24, [20, 21, 22, 23, 24, 25]).batches[0].num_evicted_blocks == 3
    return s


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("host_kv_blocks, reloaded", [(0, 0), (4, 3), (2, 2)])
def test_an_evicted_prefix_is_reloaded_from_the_host_tier(impl, host_kv_blocks, reloaded):
    # A's blocks were evicted later block first: a tier of two keeps its first two only.
    s = evicted_context(impl, host_kv_blocks)
    b = admit(s, 2, 16, [1, 2, 3, 9])  # A's context and a new block
    hit = 4 * reloaded
    assert rows(b) == [(2, 16 - hit, 16)]
    assert (b.batches[0].num_hit_tokens, b.batches[0].num_reloaded_blocks) == (hit, reloaded)
    assert s.seq(2).prefix_hit_tokens == hit


@pytest.mark.parametrize("impl", IMPLS)
def test_a_device_hit_comes_first_and_the_host_tier_extends_it(impl):
    # D shares A's first block, still on the device, and reloads the second from the host.
    s = make_scheduler(impl, block_size=4, num_kv_blocks=6, engine_type="prompt",
                       host_kv_blocks=4, max_num_batched_tokens=32)
    admit(s, 0, 12, [1, 2, 3])  # retained 2 1 0
    admit(s, 1, 20, [20, 21, 22, 23, 24])  # takes 3 4 5, evicts 2 1: block 0 stays
    d = admit(s, 2, 16, [1, 2, 3, 9])
    assert rows(d) == [(2, 4, 16)]
    assert (d.batches[0].num_hit_tokens, d.batches[0].num_reloaded_blocks) == (12, 2)
    assert d.batches[0].block_tables.tolist()[0][0] == 0  # shared, not reloaded


def test_a_reload_costs_its_bytes_over_the_host_link_on_the_modeled_clock():
    s = evicted_context("cpp", 4)
    s.add_sequence(seq_id=2, prompt_len=16, max_new_tokens=1, hash_ids=[1, 2, 3, 9])
    plan = s.schedule()
    assert plan.batches[0].num_reloaded_blocks == 3
    cost = FlopsEstimator(load_model_config("deepseek-v3")).cost_model()
    roofline = _core.Roofline(1e15, 1e12, 5e-5, 0.0)
    per_block = 1.25e-4
    seconds = [_core.ModeledStep(cost, None, roofline, mtp=False, acceptance=0.0,
                                 rng_state=np.random.default_rng(0).bit_generator.state,
                                 reload_s_per_block=r).execute(plan)[0]
               for r in (0.0, per_block)]
    assert seconds[1] == seconds[0] + 3 * per_block


def test_a_blocks_reload_time_is_its_bytes_on_a_device_over_the_host_link():
    cfg = load_model_config("deepseek-v3")
    d = Deployment(devices=8, attention_dp=8, moe_ep=8)
    h200 = load_device_profile("H200")

    def config(host_kv_blocks):
        return EngineConfig(deployment=d, scheduler=SchedulerConfig(
            block_size=64, dp_size=8, host_kv_blocks=host_kv_blocks))
    want = kv_bytes_per_token(cfg, d) * 64 / 64e9  # PCIe 5.0 x16: 64 GB/s per direction
    assert reload_s_per_block(config(1000), h200, cfg) == want
    assert reload_s_per_block(config(0), h200, cfg) == 0.0
    with pytest.raises(ValueError, match="Ascend 910B: no published host_memory_gb"):
        reload_s_per_block(config(1000), load_device_profile("Ascend 910B"), cfg)
    with pytest.raises(ValueError, match="of host memory per device; H200 has 256 GB"):
        reload_s_per_block(config(10**8), h200, cfg)
    with pytest.raises(ValueError, match="host_kv_blocks needs a deployment"):
        reload_s_per_block(replace(config(1000), deployment=None), h200, cfg)


def test_an_executor_holding_real_kv_refuses_a_host_tier():
    with pytest.raises(ValueError, match="host_kv_blocks is modeled only"):
        LLMEngine(EngineConfig(model="tiny", device="cpu",
                               scheduler=SchedulerConfig(host_kv_blocks=4)))
