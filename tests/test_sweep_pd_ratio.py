"""The P/D ratio search (docs/sweeps.md, "The P/D ratio search"): the balance of the pools'
capacities on hand numbers, the sweep file's refusals by key, a point it cannot measure
refused; in the slow tier a tiny P/D workload searched end to end."""

import json
import math
from types import SimpleNamespace

import pytest

from harness.sweeps.points.pd_ratio import Balance, refusal
from harness.sweeps.points.sweep_file import SweepError, load_sweep


def test_the_balance_is_the_decode_rate_over_the_prefill_rate():
    # one prefill instance holds 12 req/s alone, one decode instance 30: 2.5 prefill
    # instances per decode instance keep both at capacity
    b = Balance(prefill_rate=12.0, decode_rate=30.0)
    assert b.ratio == 2.5
    # round(2.5) is 3 (half up), and one count either side: 2P1D, 3P1D, 4P1D
    assert b.near(1, 8) == [(2, 1), (3, 1), (4, 1)]
    assert b.near(0, 8) == [(3, 1)]
    assert b.near(1, 3) == [(2, 1), (3, 1)]  # no pool above `most` instances
    assert b.estimate(2, 1) == 24.0  # prefill-bound: 2 x 12
    assert b.estimate(3, 1) == 30.0  # decode-bound: the decode instance's 30
    assert b.columns(3, 1) == dict(pd_prefill_rate=12.0, pd_decode_rate=30.0,
                                   pd_balanced_ratio=2.5, pd_estimated_rate=30.0)


def test_a_decode_bound_balance_searches_decode_instances():
    # prefill 40 req/s an instance, decode 15: 1 / 0.375 = 2.67 decode instances per prefill
    b = Balance(prefill_rate=40.0, decode_rate=15.0)
    assert b.ratio == pytest.approx(0.375)
    assert b.near(1, 8) == [(1, 2), (1, 3), (1, 4)]
    assert b.near(5, 8) == [(1, y) for y in range(1, 9)]  # never below one instance
    assert b.estimate(1, 2) == 30.0 and b.estimate(1, 3) == 40.0
    assert math.isnan(Balance(1.0, 1.0).columns()["pd_estimated_rate"] or math.nan)


BASE = """trace:
  generate: {requests: 12, rate: 20, prompt: {uniform: [64, 512]}, output: {uniform: [8, 64]}}
model: tiny
device: modeled:H800
deployment:
  prefill: {devices: 2, attention: {dp: 2}, moe: {ep: 2}}
  decode: {devices: 2, attention: {dp: 2}, moe: {ep: 2}}
  kv_transfer: {link: 0.01}
slo: {ttft: 0.05, tpot: 0.05}
calibration_requests: 0
telemetry: {enabled: false}
"""


def sweep_file(tmp_path, text):
    (tmp_path / "base.yaml").write_text(BASE)
    path = tmp_path / "s.yaml"
    path.write_text("base: base.yaml\n" + text)
    return path


@pytest.mark.parametrize("text, where, message", [
    ("mode: run\naxes: {engine.max_num_seqs: [2]}\nsearch: {method: pd_ratio}\n",
     "s.yaml:4: search.method", "expected mode: capacity, got mode: run"),
    ("mode: capacity\naxes: {deployment.prefill.instances: [1, 2]}\n"
     "search: {method: pd_ratio}\n", "s.yaml:3: axes.deployment.prefill.instances",
     "set by search.method pd_ratio"),
    ("mode: capacity\naxes: {engine.max_num_seqs: [2]}\nsearch: {method: pd_ratio, near: -1}\n",
     "s.yaml:4: search.near", "expected an integer >= 0"),
    ("mode: capacity\naxes: {engine.max_num_seqs: [2]}\nsearch: {method: pd_ratio, near: 17}\n",
     "s.yaml:4: search.near", "expected an integer <= 16 (instance counts either side of the "
                              "balance), the most a sweep takes, got 17"),
    ("mode: capacity\naxes: {engine.max_num_seqs: [2]}\nsearch: {method: pd_ratio, most: 0}\n",
     "s.yaml:4: search.most", "expected an integer >= 1"),
    ("mode: capacity\naxes: {engine.max_num_seqs: [2]}\nsearch: {method: pd_ratio, n: 3}\n",
     "s.yaml:4: search.n", "unknown key for method pd_ratio; expected method, most, near"),
])
def test_a_wrong_pd_ratio_search_names_its_key(tmp_path, text, where, message):
    with pytest.raises(SweepError) as e:
        load_sweep(sweep_file(tmp_path, text))
    assert where in str(e.value) and message in str(e.value)


def test_the_search_reads_its_defaults(tmp_path):
    sweep = load_sweep(sweep_file(tmp_path, "mode: capacity\naxes: {engine.max_num_seqs: [2]}\n"
                                            "search: {method: pd_ratio}\n"))
    assert (sweep.method, sweep.near, sweep.most) == ("pd_ratio", 1, 8)


def test_a_point_without_pools_a_generated_trace_or_a_ttft_limit_is_refused():
    def workload(pools=True, generate=True, ttft=1.0):
        pool = {"devices": 2} if pools else None
        return SimpleNamespace(deployment=SimpleNamespace(prefill=pool, decode=pool),
                               trace=SimpleNamespace(generate={"requests": 1} if generate
                                                     else None),
                               slo=SimpleNamespace(ttft=ttft, tpot=0.05, e2e=None))
    assert refusal(workload()) == ""
    assert refusal(workload(pools=False)).startswith(
        "deployment: the P/D ratio search measures a prefill and a decode pool")
    assert refusal(workload(generate=False)).startswith("trace: ")
    assert refusal(workload(ttft=None)).startswith("slo.ttft: ")


@pytest.mark.slow  # capacity searches of a tiny P/D deployment, in processes
def test_the_pools_are_measured_alone_and_the_ratios_near_the_balance_searched(
        tmp_path, capsys):
    from harness.commands import main

    # the tiny model's prefill step is a fraction of a millisecond: a TTFT limit of 0.15 ms
    # saturates both pools, the prefill pool at about half the decode pool's rate (a
    # balance of two prefill instances a decode instance, asked for below); arrivals at a
    # constant rate, so that a queue grows only past a pool's capacity and the searches'
    # length checks pass
    base = BASE.replace("requests: 12, rate: 20", "requests: 400, rate: 1000, arrival: "
                        "constant").replace("ttft: 0.05", "ttft: 0.00015").replace(
        "output: {uniform: [8, 64]}", "output: {fixed: 2}").replace(
        "prompt: {uniform: [64, 512]}", "prompt: {uniform: [256, 1024]}").replace(
        "link: 0.01", "link: 10000")  # the KV's transfer within the TTFT limit
    (tmp_path / "base.yaml").write_text(base.replace(
        "decode: {devices: 2,", "decode: {engine: {max_num_seqs: 64}, devices: 2,"))
    path = tmp_path / "s.yaml"
    path.write_text("base: base.yaml\nmode: capacity\naxes: {engine.max_num_batched_tokens: "
                    "[1024, nope]}\nsearch: {method: pd_ratio, near: 1}\n")
    argv = ["sweep", str(path), "--set", f"output={tmp_path / 'out'}", "--workers", "2",
            "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    refused = [r for r in out["rows"] if r["status"] == "refused"]
    assert len(refused) == 1 and refused[0]["axes"] == {"engine.max_num_batched_tokens": "nope"}
    rows = [r for r in out["rows"] if r["status"] == "done"]
    prefill, decode = rows[0]["pd_prefill_rate"], rows[0]["pd_decode_rate"]
    assert prefill > 0 and decode > 0
    b = Balance(prefill, decode)
    pairs = b.near(1, 8)
    assert [(r["axes"]["deployment.prefill.instances"], r["axes"]["deployment.decode.instances"])
            for r in rows] == pairs and len(out["rows"]) == len(pairs) + 1
    for r, (x, y) in zip(rows, pairs):
        assert r["pd_balanced_ratio"] == pytest.approx(b.ratio)
        assert r["pd_estimated_rate"] == pytest.approx(b.estimate(x, y))
        assert r["outcome"] == "capacity" and r["rate"] > 0
    # every pool measurement and searched ratio is a point of the sweep: run again, all skip
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["skipped"] == len(pairs) and again["rows"] == [
        dict(r, skipped=r["status"] == "done") for r in out["rows"]]
    # a balance beyond `most` instances of a pool: the point fails, saying so; its pools'
    # measurements are points of the sweep already complete, not run again
    path.write_text(path.read_text().replace("near: 1", "near: 0, most: 1"))
    assert main(argv) == 1
    failed = json.loads(capsys.readouterr().out)["rows"][0]
    assert failed["status"] == "failed" and failed["reason"].startswith(
        f"search.method pd_ratio: the balance, {b.ratio:.4g} prefill instances per decode "
        f"instance, asks for more than search.most (1) of one pool's")
