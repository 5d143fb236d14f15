"""A P/D deployment replayed end to end (docs/disaggregation.md): the KV transfer's bytes
and times by hand arithmetic, link sharing, backpressure, the routers' choices, the TTFT
definition, identical tables for a seed, and refused workloads."""

import numpy as np
import pandas as pd
import pytest
import yaml

from harness.ranks.pd_join import PDJoin
from harness.schema.tables import REQUESTS
from harness.schema.values import AWAITING_DECODE_ROOM, IN_KV_TRANSFER, STRANDED_REASONS
from harness.sweeps.sweep import run_workload
from harness.workload import WorkloadError, load_workload

pytestmark = pytest.mark.core

KV_PER_TOKEN = 240.0  # tiny: 40 values a token a layer at BF16 over 2 + 1 (MTP) layers
LAYERS = 3
LINK = 1e6  # bytes/s: `link: 0.001` GB/s, slow enough to see
LATENCY = 20e-6
HANDED = REQUESTS.column("status").code("handed_off")


def pd_workload(tmp_path, trace_rows, prefill=None, decode=None, kv=None, router=None,
                extra=""):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,max_new_tokens\n"
                     + "".join(f"{a},{p},{o}\n" for a, p, o in trace_rows))
    kv = {"link": 0.001, "latency_us": 20, "layerwise": False, **(kv or {})}
    path = tmp_path / "pd.yaml"
    path.write_text(f"""trace: {{file: trace.csv}}
model: tiny
device: modeled:H800
engine: {{max_num_batched_tokens: 4096, block_size: 16}}
deployment:
  prefill: {prefill or {"instances": 1}}
  decode: {decode or {"instances": 1}}
  kv_transfer: {kv}
  router: {router or {}}
output: {tmp_path / "results"}
calibration_requests: 0
telemetry: {{enabled: false}}
{extra}""")
    return path


def run_pd(path):
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    tables = {name: pd.read_parquet(run_dir / f"{name}.parquet")
              for name in ("steps", "batches", "requests", "summary")}
    tables["requests"] = tables["requests"].sort_values("request_id", ignore_index=True)
    return tables


def test_one_request_moves_its_kv_after_its_prefill(tmp_path):
    r = run_pd(pd_workload(tmp_path, [(0.0, 1000, 8)]))["requests"].iloc[0]
    nbytes = 1000 * KV_PER_TOKEN
    assert r.kv_bytes == nbytes
    # not layerwise: the idle decode instance admits it at the hand-off
    assert r.transfer_start_s == r.handoff_s and r.decode_wait_s == 0
    assert r.transfer_end_s == pytest.approx(r.handoff_s + nbytes / LINK + LATENCY)
    # the user sees the first token with the KV
    assert r.first_token_s == r.transfer_end_s
    assert r.ttft_s == pytest.approx(r.transfer_end_s - r.arrival_s)
    assert (r.status, r.output_tokens, r.prefill_instance, r.decode_instance) == \
        ("finished", 8, 0, 0)
    assert r.decode_stall_s == 0  # the decode instance's: it never runs a prompt round


@pytest.mark.parametrize("layerwise", [False, True])
@pytest.mark.parametrize("loop", ["python", "cpp"])
def test_a_one_token_request_is_done_at_its_hand_off(tmp_path, loop, layerwise):
    """Its token is the prefill's, sampled at its prefill step's end (layerwise, it asks
    for decode room before that): the decode instance finishes it as it is added, and no
    KV moves."""
    path = pd_workload(tmp_path, [(0.0, 100, 1), (0.0, 100, 3)], kv={"layerwise": layerwise},
                       extra=f"replay_loop: {loop}\n")
    one, three = run_pd(path)["requests"].itertuples()
    assert one.status == three.status == "finished" and one.output_tokens == 1
    assert np.isnan(one.transfer_start_s) and not np.isnan(three.transfer_start_s)
    assert one.handoff_s == one.first_token_s < three.first_token_s


def test_layerwise_the_transfer_starts_with_the_last_chunks_first_layer(tmp_path):
    tables = run_pd(pd_workload(tmp_path, [(0.0, 1000, 4)], kv={"layerwise": True}))
    r = tables["requests"].iloc[0]
    steps = tables["steps"]
    step = steps[(steps.role == "prefill") & (steps.t_end_s == r.handoff_s)].iloc[0]
    asked = step.t_start_s + (step.t_end_s - step.t_start_s) / LAYERS
    nbytes = 1000 * KV_PER_TOKEN
    assert r.transfer_start_s == pytest.approx(asked)
    # the fluid's end, or the last layer's share after the prefill, whichever is later
    assert r.transfer_end_s == pytest.approx(
        max(asked + nbytes / LINK, r.handoff_s + nbytes / LAYERS / LINK) + LATENCY)


def test_two_transfers_from_one_device_share_its_link(tmp_path):
    r = run_pd(pd_workload(tmp_path, [(0.0, 500, 4), (0.0, 500, 4)]))["requests"]
    assert r.handoff_s[0] == r.handoff_s[1]  # prefilled in one step
    nbytes = 500 * KV_PER_TOKEN
    assert list(r.transfer_end_s) == pytest.approx([r.handoff_s[0] + 2 * nbytes / LINK
                                                    + LATENCY] * 2)


def test_a_decode_instance_without_room_makes_the_transfer_wait(tmp_path):
    # 80 blocks of 16 tokens hold one 1,000-token sequence (63 blocks, 69 at its end), not two
    rows = [(0.0, 1000, 50), (0.0, 1000, 50)]
    r = run_pd(pd_workload(tmp_path, rows,
                           decode={"instances": 1, "engine": {"num_kv_blocks": 80}}))["requests"]
    first, second = (r.iloc[i] for i in np.argsort(r.transfer_start_s.to_numpy()))
    assert first.decode_wait_s == 0
    assert second.transfer_start_s >= first.last_token_s  # its room came when it left
    assert second.decode_wait_s == pytest.approx(second.transfer_start_s - second.handoff_s)
    assert (r.status == "finished").all()


def test_the_routers_choices(tmp_path):
    rows = [(i * 0.5, 100, 2) for i in range(4)]
    r = run_pd(pd_workload(tmp_path, rows, prefill={"instances": 2},
                           decode={"instances": 2},
                           router={"prefill": "round_robin", "decode": "round_robin"}))
    requests = r["requests"]
    assert list(requests.prefill_instance) == [0, 1, 0, 1]
    assert list(requests.decode_instance) == [0, 1, 0, 1]
    steps = r["steps"]
    assert set(zip(steps.role, steps.instance)) == {("prefill", 0), ("prefill", 1),
                                                    ("decode", 0), ("decode", 1)}


def test_least_kv_sends_a_sequence_where_more_blocks_are_free(tmp_path):
    # instance 0 reserves the first's blocks at once; its KV moves until 0.24 s. The second
    # goes to instance 1, and so does the third: instance 1 has freed its blocks by then
    # (its KV took 24 ms), instance 0 still holds the first's
    rows = [(0.0, 1000, 400), (0.1, 100, 2), (0.15, 100, 2)]
    r = run_pd(pd_workload(tmp_path, rows, decode={"instances": 2},
                           router={"decode": "least_kv"}))["requests"]
    assert list(r.decode_instance) == [0, 1, 1]


@pytest.mark.parametrize("loop", ["cpp", "python"])
def test_least_kv_counts_the_blocks_routed_and_not_yet_admitted(tmp_path, loop):
    # four prompts prefilled in one step are handed off at one time: each routed before
    # any is admitted, so free blocks alone would send all four to instance 0
    rows = [(0.0, 100, 8)] * 4
    r = run_pd(pd_workload(tmp_path, rows, decode={"instances": 2},
                           router={"decode": "least_kv"}, extra=f"replay_loop: {loop}\n")
               )["requests"]
    assert r.sort_values("request_id").decode_instance.tolist() == [0, 1, 0, 1]


def test_a_seed_gives_identical_tables(tmp_path):
    rng = np.random.default_rng(3)
    rows = [(t, int(p), int(o)) for t, p, o in zip(np.cumsum(rng.exponential(0.05, 40)),
                                                     rng.integers(50, 2000, 40),
                                                     rng.integers(1, 60, 40))]
    host_timed = ["run_id", "sched_cpp_ns", "sched_call_ns", "postprocess_ns", "step_ns",
                  "flush_ns"]
    runs = []
    for k in range(2):
        folder = tmp_path / str(k)
        folder.mkdir()
        path = pd_workload(folder, rows, prefill={"instances": 2},
                           kv={"layerwise": True, "link": 0.01},
                           router={"prefill": "least_tokens", "decode": "least_kv"})
        runs.append(run_pd(path))
    for name in ("steps", "batches", "requests"):
        a, b = (run[name].drop(columns=[c for c in host_timed if c in run[name]])
                for run in runs)
        pd.testing.assert_frame_equal(a, b)
    assert (runs[0]["requests"].status == "finished").all()


def test_the_summary_has_each_pools_rows_and_the_transfers(tmp_path):
    s = run_pd(pd_workload(tmp_path, [(0.0, 1000, 8), (0.5, 500, 8)]))["summary"]
    value = {(m, st): v for m, st, v in zip(s.metric, s.stat, s.value)}
    assert value[("prefill_forward", "count")] >= 1 and value[("decode_forward", "count")] >= 7
    window = value[("window", "duration")]
    assert value[("per_device", "input_tokens_per_prefill_device")] == \
        pytest.approx(1500 / window)
    assert value[("per_device", "total_tokens")] == pytest.approx((1500 + 16) / window / 2)
    assert value[("kv_transfer", "count")] == 2
    assert value[("kv_transfer", "max")] == pytest.approx(1000 * KV_PER_TOKEN / LINK + LATENCY)
    assert ("prefill0_prefix_cache", "hit_rate") in value
    assert value[("decode_stall", "share")] == 0 and value[("decode_stall", "count")] == 2


def step_log_rows(ids, status, stall):
    """A step log's requests rows (the columns csrc/recorder/columns.hpp declares), as the
    recorder hands them on: `reason` an object array."""
    n = len(ids)
    return dict(request_id=np.array(ids, np.int64), enqueue_s=np.zeros(n),
                first_scheduled_s=np.zeros(n), first_token_s=np.ones(n),
                last_token_s=np.full(n, 2.0), decode_stall_s=np.array(stall, np.float64),
                first_scheduled_step=np.zeros(n, np.int64), output_tokens=np.ones(n, np.int64),
                dp_rank=np.zeros(n, np.int32), preemptions=np.zeros(n, np.int32),
                recomputed_tokens=np.zeros(n, np.int64), prefix_hit_tokens=np.zeros(n, np.int64),
                status=np.array(status, np.uint8), reason=np.array([""] * n, dtype=object))


def test_a_joined_row_takes_the_decode_instances_decode_stall():
    """harness/ranks/pd_join.py: request 0 handed off (the prefill side's stall, made up
    here, is not the joined row's), request 1 handed off and stranded between the pools."""
    join = PDJoin(2)
    (prefill_only,) = join.rows([("prefill", step_log_rows([0, 1], [HANDED] * 2, [5.0, 5.0]))])
    assert len(prefill_only["request_id"]) == 0
    (joined,) = join.rows([("decode", step_log_rows([0], [0], [0.25]))])
    assert joined["decode_stall_s"].tolist() == [0.25]
    assert join.stranded()["decode_stall_s"].tolist() == [0.0]


def test_a_request_stranded_between_the_pools_says_where_it_was():
    """harness/ranks/pd_join.py: of two requests handed off and never decoded, the one whose
    KV transfer started is in transfer, the other awaits decode room: the declared reasons
    (harness/schema/values.py), as the step log writes them (tests/test_handoff_row.py)."""
    join = PDJoin(2)
    join.rows([("prefill", step_log_rows([0, 1], [HANDED] * 2, [0.0, 0.0]))])
    join.transfers["transfer_start_s"][1] = 3.0
    stranded = join.stranded()
    assert stranded["reason"].tolist() == [AWAITING_DECODE_ROOM, IN_KV_TRANSFER]
    assert set(stranded["reason"]) == set(STRANDED_REASONS)
    assert stranded["decode_dp_rank"].tolist() == [-1, -1]  # no decode row: none


@pytest.mark.parametrize("deployment, key, message", [
    ({"prefill": {"instances": 1}}, "deployment.decode", "needs both pools"),
    ({"prefill": {}, "decode": {}, "devices": 2}, "deployment.devices",
     "lays out each pool in its own section"),
    ({"kv_transfer": {"latency_us": 5}}, "deployment.kv_transfer",
     "only a P/D deployment takes it"),
    ({"prefill": {"devices": 0}, "decode": {}}, "deployment.prefill.devices",
     "expected an integer >= 1"),
    ({"prefill": {}, "decode": {}, "router": {"prefill": "least_kv"}},
     "deployment.router.prefill", "one of round_robin, least_tokens, cache_aware"),
    ({"prefill": {"engine": {"engine_type": "normal"}}, "decode": {}},
     "deployment.prefill.engine.engine_type", "the pool sets engine_type itself"),
    ({"prefill": {}, "decode": {"engine": {"overlap": True}}},
     "deployment.decode.engine.overlap", "one step at a time"),
    ({"prefill": {}, "decode": {"engine": {"num_kv_blocks": 4}}}, "deployment.decode",
     "holds 4 blocks of 16 tokens; the longest prompt (1,000 tokens) needs 63"),
    ({"prefill": {"device": "modeled:Ascend 950DT"}, "decode": {}},
     "deployment.kv_transfer.link", "prefill instances run on Ascend 950DT, which has no "
                                    "published scaleout bandwidth (pools on different devices"),
    ({"prefill": {"moe": {"ep": 3}}, "decode": {}}, "deployment.prefill.moe",
     "ep x tp must equal devices (1)"),
])
def test_a_bad_pd_deployment_names_its_key(tmp_path, deployment, key, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({
        "trace": {"generate": {"requests": 2, "prompt": {"fixed": 1000},
                               "output": {"fixed": 4}}},
        "model": "tiny", "device": "modeled:H800", "precision": "fp8", "deployment": deployment,
        "output": str(tmp_path / "results")}))
    with pytest.raises(WorkloadError) as e:
        load_workload(path)
    assert f"{key}: " in str(e.value) and message in str(e.value)
    assert not (tmp_path / "results").exists()


def test_a_pd_deployment_is_modeled_or_real(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trace: {generate: {requests: 2}}\ndevice: emulated:B200\n"
                    "deployment: {prefill: {}, decode: {}}\n")
    with pytest.raises(WorkloadError, match=r"device: a P/D deployment is modeled or runs on "
                                            r"a torch device: expected modeled:<profile>, cpu"):
        load_workload(path)


def test_a_decode_row_before_its_prefill_row_waits_for_it():
    """P/D instances as processes send their chunks independently: a request's decode row
    may come first; it is joined when its prefill row comes, or written as it is at the end
    if that never comes."""
    join = PDJoin(3)
    assert [len(r["request_id"]) for r in join.rows(
        [("decode", step_log_rows([0, 2], [0, 0], [0.25, 0.5]))])] == [0]
    prefill_only, joined = join.rows([("prefill", step_log_rows([0, 1], [HANDED] * 2,
                                                                [5.0, 5.0]))])
    assert joined["request_id"].tolist() == [0]
    assert joined["decode_stall_s"].tolist() == [0.25]
    held, stranded = join.unjoined()
    assert held["request_id"].tolist() == [2]  # its prefill process never sent it
    assert stranded["request_id"].tolist() == [1]  # handed off, never decoded


def test_a_colocated_runs_rows_name_their_one_instance(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"""trace: {{generate: {{requests: 4, rate: 100}}}}
model: tiny
device: modeled:H800
output: {tmp_path / "results"}
calibration_requests: 0
telemetry: {{enabled: false}}
""")
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    steps = pd.read_parquet(run_dir / "steps.parquet")
    assert set(zip(steps.role, steps.instance)) == {("colocated", 0)}
    r = pd.read_parquet(run_dir / "requests.parquet")
    assert (r.prefill_instance == 0).all() and (r.decode_dp_rank == r.dp_rank).all()
    assert r.kv_bytes.isna().all() and r.transfer_end_s.isna().all()


def test_pools_on_two_devices_move_the_kv_at_the_slower_end(tmp_path):
    """Prefill on H100s, decode on H200s (each with its scale-out figure): the KV moves at
    the smaller of the two ends' links, and the manifest names each pool's device."""
    import json

    from engine.devices.profile import load_device_profile

    path = pd_workload(tmp_path, [(0.0, 1000, 4)],
                       prefill={"instances": 1, "device": "modeled:H100"},
                       decode={"instances": 1, "device": "modeled:H200"},
                       kv={"link": "scaleout"})
    r = run_pd(path)["requests"].iloc[0]
    bps = min(load_device_profile(name).scaleout_gb_s.value * 1e9
              * load_device_profile(name).network_efficiency.value for name in ("H100", "H200"))
    assert r.transfer_end_s == pytest.approx(r.handoff_s + 1000 * KV_PER_TOKEN / bps + LATENCY)
    (run_dir,) = (tmp_path / "results").glob("*/*")
    pools = json.loads((run_dir / "manifest.json").read_text())["pools"]
    assert {role: p["modeled_device"] for role, p in pools.items()} == \
        {"prefill": "H100", "decode": "H200"}


def test_a_stopped_run_writes_every_request_with_where_it_was(tmp_path):
    """A signal mid-run: whole tables, marked incomplete; a request between the pools is
    unfinished with its reason, and one never enqueued is too."""
    import json

    from harness.io.interrupt import Stop

    rows = [(i * 0.01, 1000, 200) for i in range(200)]
    path = pd_workload(tmp_path, rows, kv={"link": 0.01})
    stop = Stop()

    def progress(done, total):
        if done >= 20:
            stop.request()

    (run,) = run_workload(load_workload(path), progress, stop)
    run_dir = run.path
    assert json.loads((run_dir / "manifest.json").read_text())["complete"] is False
    r = pd.read_parquet(run_dir / "requests.parquet")
    assert sorted(r.request_id) == list(range(200))
    assert {"finished", "unfinished"} <= set(r.status)
    reasons = set(r.reason[r.status == "unfinished"])
    assert reasons <= {"", "never enqueued", *STRANDED_REASONS}
    # 24 MB/s of KV asked of a 10 MB/s link: transfers pile up
    stranded = r[r.reason.isin(STRANDED_REASONS)]
    assert len(stranded) > 0
    assert stranded.first_token_s.isna().all() and (stranded.output_tokens == 0).all()
