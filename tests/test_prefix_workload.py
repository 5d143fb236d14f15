"""The bundled prefix-caching workload: its A/B switch, the hash block size checked at
validate time, and a short run of each arm (hits, fewer FLOPs, the same trace)."""

import pandas as pd
import pytest

from harness.sweeps.sweep import run_workload
from harness.workload import WorkloadError, load_workload
from tests.helpers import REPO

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

WORKLOAD = REPO / "workloads" / "prefix_caching.yaml"


def test_the_two_arms_differ_in_the_switch_only():
    on = load_workload(WORKLOAD).values
    off = load_workload(WORKLOAD, ("engine.prefix_caching=false",)).values
    assert on["engine"]["prefix_caching"] and not off["engine"]["prefix_caching"]
    on["engine"]["prefix_caching"] = False
    assert on == off


def test_a_block_size_the_trace_hash_block_does_not_fit_is_refused_at_validate():
    # The trace's 512 is read from its file, so the error points at trace.file.
    with pytest.raises(WorkloadError, match=r"prefix_caching.yaml:9: trace.file: hash block "
                                            r"size 512 and block_size 96: one must divide "
                                            r"the other"):
        load_workload(WORKLOAD, ("engine.block_size=96",))
    with pytest.raises(WorkloadError, match=r"trace.hash_block_size: hash block size 48 and "
                                            r"block_size 64"):
        load_workload(WORKLOAD, ("trace.hash_block_size=48",))


def test_each_arm_runs_and_caching_saves_prefill_work(tmp_path):
    sums = {}
    for caching in ("true", "false"):
        workload = load_workload(WORKLOAD, (f"output={tmp_path / caching}", "trace.limit=40",
                                            f"engine.prefix_caching={caching}"))
        (run,) = run_workload(workload)
        run_dir = run.path
        steps = pd.read_parquet(run_dir / "steps.parquet")
        requests = pd.read_parquet(run_dir / "requests.parquet")
        assert (requests["status"] == "finished").all()
        sums[caching] = (int(steps["prefix_hit_tokens"].sum()),
                         int(requests["prefix_hit_tokens"].sum()),
                         float(steps.loc[steps["phase"] == "prompt", "model_flops"].sum()))
    hits, request_hits, flops = sums["true"]
    assert hits > 0 and request_hits == hits
    assert sums["false"][:2] == (0, 0) and sums["false"][2] > flops


@pytest.mark.slow
def test_cache_aware_dispatch_recovers_the_hits_dp_ranks_lose(tmp_path):
    """The whole trace on 8 DP ranks (docs/scheduling.md, "DP ranks"): round robin splits a
    conversation's turns over the ranks and hits 51.7 % of the prompt tokens; cache_aware
    hits 72.1 %, against the trace's reuse bound of 73.8 % (one rank: every hit)."""
    hit_rate = {}
    for assign in ("round_robin", "cache_aware"):
        workload = load_workload(WORKLOAD, (
            f"output={tmp_path / assign}", f"engine.dp_assign={assign}",
            "deployment={devices: 8, attention: {dp: 8}, moe: {ep: 8}}"))
        (run,) = run_workload(workload)
        run_dir = run.path
        summary = pd.read_parquet(run_dir / "summary.parquet").set_index(["metric", "stat"])
        hit_rate[assign] = summary.loc[("prefix_cache", "hit_rate"), "value"]
    assert hit_rate["round_robin"] == pytest.approx(0.5173, abs=5e-4)
    assert hit_rate["cache_aware"] == pytest.approx(0.7209, abs=5e-4)


@pytest.mark.slow
def test_the_cache_aware_router_keeps_conversations_on_one_prefill_instance(tmp_path):
    """The whole trace through four prefill instances (docs/disaggregation.md, "Routers"):
    round robin spreads a conversation's turns and hits 57.6 % of the prompt tokens; the
    cache-aware router hits 73.8 %, the trace's reuse bound."""
    hit_rate = {}
    for router in ("round_robin", "cache_aware"):
        workload = load_workload(WORKLOAD, (
            f"output={tmp_path / router}", "telemetry.enabled=false",
            "deployment={prefill: {instances: 4, devices: 8, attention: {tp: 8}, "
            "moe: {ep: 8}}, decode: {devices: 8, attention: {dp: 8}, moe: {ep: 8}}, "
            f"router: {{prefill: {router}, decode: least_kv}}}}"))
        (run,) = run_workload(workload)
        run_dir = run.path
        summary = pd.read_parquet(run_dir / "summary.parquet").set_index(["metric", "stat"])
        hit_rate[router] = summary.loc[("prefill_prefix_cache", "hit_rate"), "value"]
    assert hit_rate["round_robin"] == pytest.approx(0.5759, abs=5e-4)
    assert hit_rate["cache_aware"] == pytest.approx(0.7384, abs=5e-4)
