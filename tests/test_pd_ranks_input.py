"""A P/D deployment on a real device: what its instance processes cannot run refused by
key before anything runs (exit 2, nothing written)."""

import os

import pytest

from harness.workload import WorkloadError, load_workload
from harness.workload.real_deployment import CPU_RANKS_PER_CORE

MORE_THAN_THE_HOST = (os.cpu_count() or 1) * CPU_RANKS_PER_CORE  # per pool: twice the limit

BASE = ("trace: {generate: {requests: 2}}\nmodel: tiny\ndevice: cpu\n"
        "telemetry: {enabled: false}\n")


def load(tmp_path, body):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + body)
    return load_workload(path)


def test_each_instance_is_a_process_per_device(tmp_path):
    w = load(tmp_path, "deployment: {prefill: {instances: 1},\n"
                       "             decode: {instances: 2, devices: 2, micro_batches: 2}}\n")
    assert w.ranks == 5 and w.values["frontend"]["mode"] == "inline"
    prefill, decode = (w.engine_config("released", pool) for pool in w.disaggregation.pools)
    assert (prefill.scheduler.engine_type, decode.scheduler.engine_type) == \
        ("prompt", "completion")
    assert prefill.keep_tokens and not decode.keep_tokens  # the first tokens handed over


def test_the_engine_type_the_pools_set_may_be_given_as_its_default(tmp_path):
    load(tmp_path, "deployment: {prefill: {}, decode: {}}\nengine: {engine_type: normal}\n")


@pytest.mark.parametrize("body, key, message", [
    ("deployment: {prefill: {devices: 4, moe: {ep: 2}}, decode: {}}",
     "deployment.prefill.moe.ep", "expected 1 or 4"),
    ("deployment: {prefill: {}, decode: {devices: 2, attention: {tp: 2}}}",
     "deployment.decode.attention.tp", "TP on the real engine is not built yet"),
    ("deployment: {prefill: {}, decode: {expert_imbalance: 1.2}}",
     "deployment.decode.expert_imbalance",
     "modeled devices only"),
    ("deployment: {prefill: {device: 'modeled:B200'}, decode: {}}",
     "deployment.prefill.device", "both pools run on `device` (cpu): expected it unset"),
    ("deployment: {prefill: {}, decode: {}, kv_transfer: {link: scaleup}}",
     "deployment.kv_transfer.link", "moves over the process group's backend"),
    ("deployment: {prefill: {}, decode: {}}\nclock: virtual", "clock",
     "rank processes step on the real clock"),
    ("deployment: {prefill: {}, decode: {}}\nload: {mode: concurrency, concurrency: 2}",
     "load.mode", "a closed loop over rank processes is not built yet"),
    ("deployment: {prefill: {engine: {overlap: true}}, decode: {}}",
     "deployment.prefill.engine.overlap", "one step at a time"),
    ("deployment: {prefill: {}, decode: {}}\nengine: {overlap: true}", "engine.overlap",
     "a P/D deployment: each instance steps on its own clock"),
    (f"deployment: {{prefill: {{instances: {MORE_THAN_THE_HOST}}}, "
     f"decode: {{instances: {MORE_THAN_THE_HOST}}}}}",
     "deployment.decode.instances", "rank processes on a host of"),
])
def test_what_the_instance_processes_cannot_run_is_refused_by_key(tmp_path, body, key,
                                                                  message):
    with pytest.raises(WorkloadError) as e:
        load(tmp_path, body + "\n")
    assert f"{key}: " in str(e.value) and message in str(e.value), str(e.value)
    assert not (tmp_path / "results").exists()
