"""steptrace compare of a measured run and a modeled run of one workload, part by part: the
steps matched by phase and token bucket, the medians and errors of hand-made steps tables,
the parts a run does not have left out, and other pairs of arms left as they were."""

import json

import numpy as np
import pandas as pd
import pytest

from harness.analysis.compare import Arm, compare
from harness.analysis.runs import load_runs
from harness.commands import main
from tests.helpers import synthetic_run

PARTS = ["attention", "dense", "experts", "dispatch", "combine"]
SUMMARY = {"throughput.output_tokens": (100.0, "tok/s"), "ttft.p99": (0.5, "s")}
OLD_KEYS = ["arm_a", "arm_b", "runs_a", "runs_b", "left_out", "busy_host", "differing_keys",
            "kind", "headline", "metrics"]


def step(tokens, prefill=0, s=0.0, warmup=False, empty=False, rank=0, **parts):
    """One steps-table row: `s` in every part not given, the forward their sum in ns."""
    times = {f"{p}_s": parts.get(p, s) for p in PARTS}
    return dict(warmup=warmup, empty=empty, dp_rank=rank, tokens_q=tokens,
                prefill_tokens_q=prefill, **times,
                forward_ns=int(round(sum(times.values()) * 1e9)))


def make_run(path, rows, device="cpu", drop=(), **values):
    """A run folder with a summary and a steps table of `rows` (less the columns `drop`):
    measured on `device`, or modeled where it is `modeled:<profile>`."""
    modeled = device.startswith("modeled:")
    synthetic_run(path, SUMMARY, modeled=modeled, values=dict(device=device, **values))
    if modeled:
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["modeled_device"] = device.partition(":")[2].upper()
        (path / "manifest.json").write_text(json.dumps(manifest))
    pd.DataFrame(rows).drop(columns=list(drop)).to_parquet(path / "steps.parquet")
    return path


def arm(*paths):
    return Arm("", tuple(load_runs(paths)))


MEASURED = [
    # decode, 4 .. 7 tokens: attention 1 .. 5 ms, median 3 ms
    *(step(4 + i % 2, attention=(i + 1) * 1e-3, dense=2e-3, experts=4e-3) for i in range(5)),
    *(step(100, prefill=100, s=0.1) for _ in range(3)),  # prefill, 64 .. 127 tokens
    *(step(10, prefill=6, s=0.05) for _ in range(2)),     # mixed: the modeled run has none
    step(5, s=9.0, warmup=True),                          # warm-up and empty: left out
    step(5, s=9.0, empty=True),
]
MODELED = [
    *(step(6, attention=1.5e-3, dense=3e-3, experts=4e-3) for _ in range(3)),
    step(120, prefill=120, s=0.12),
    step(1, s=1.0),  # decode of one token: the measured run has none
]


@pytest.fixture
def pair(tmp_path):
    measured = make_run(tmp_path / "measured", MEASURED)
    modeled = make_run(tmp_path / "modeled", MODELED, device="modeled:h100", clock="virtual")
    return measured, modeled


def test_like_steps_are_compared_with_exact_medians_and_errors(pair):
    parts = compare(arm(pair[0]), arm(pair[1]), parts=True).step_parts
    assert (parts.measured_arm, parts.modeled_arm, parts.profile) == ("A", "B", "H100")
    assert parts.measured_device == "x86_64 (cpu)" and not parts.not_compared
    attention = next(p for p in parts.parts if p.part == "attention")
    prefill, decode = attention.buckets  # PHASES' order; no mixed bucket, no 1-token one
    assert (prefill.phase, prefill.tokens_from, prefill.tokens_to) == ("prefill", 64, 127)
    assert (decode.phase, decode.tokens_from, decode.tokens_to) == ("decode", 4, 7)
    assert (decode.steps_measured, decode.steps_modeled) == (5, 3)
    assert decode.measured_s == pytest.approx(3e-3) and decode.modeled_s == pytest.approx(1.5e-3)
    assert decode.error == pytest.approx(-0.5)
    assert 1.5 / 5 - 1 <= decode.low < decode.error < decode.high <= 1.5 / 1 - 1
    assert prefill.error == pytest.approx(0.2)
    assert prefill.low == prefill.high == prefill.error  # every measured step alike
    # weighted by measured steps: (5 x -0.5 + 3 x 0.2) / 8; the mixed steps not compared
    assert attention.error == pytest.approx((5 * -0.5 + 3 * 0.2) / 8)
    assert (attention.steps_compared, attention.steps_measured) == (8, 10)
    dense = next(p for p in parts.parts if p.part == "dense")
    assert dense.buckets[1].error == pytest.approx(0.5)
    forward = next(p for p in parts.parts if p.part == "forward")  # the parts' sum here
    assert forward.buckets[1].measured_s == pytest.approx(3e-3 + 2e-3 + 4e-3)


def test_arm_a_modeled_and_b_measured_is_the_same_error(pair):
    parts = compare(arm(pair[1]), arm(pair[0]), parts=True).step_parts
    assert (parts.measured_arm, parts.modeled_arm) == ("B", "A")
    attention = next(p for p in parts.parts if p.part == "attention")
    assert attention.buckets[1].error == pytest.approx(-0.5)


def test_a_part_a_run_does_not_have_is_left_out_not_shown_as_zero(tmp_path, capsys):
    """dispatch: 0 in every measured step (no EP); combine: no column in the modeled
    steps table; forward: two DP ranks, whose rows share the step's forward."""
    measured = make_run(tmp_path / "m", [{**r, "dispatch_s": 0.0} for r in MEASURED]
                        + [step(4, s=1e-3, rank=1, dispatch=0.0)])
    modeled = make_run(tmp_path / "d", MODELED, device="modeled:h100", drop=["combine_s"])
    parts = compare(arm(measured), arm(modeled), parts=True).step_parts
    assert [p.part for p in parts.parts] == ["attention", "dense", "experts"]
    assert "0 in every measured step" in parts.left_out["dispatch"]
    assert "modeled runs hold no value of it" in parts.left_out["combine"]
    assert "one-rank runs only" in parts.left_out["forward"]
    assert main(["compare", str(measured), "--", str(modeled)]) == 0
    text = capsys.readouterr().out
    assert "left out: dispatch: 0 in every measured step" in text
    assert not [line for line in text.splitlines() if line.startswith(("dispatch", "combine"))]


def test_no_bucket_in_both_leaves_every_part_out(tmp_path):
    measured = make_run(tmp_path / "m", [step(4, s=1e-3) for _ in range(3)])
    modeled = make_run(tmp_path / "d", [step(64, s=1e-3)], device="modeled:h100")
    parts = compare(arm(measured), arm(modeled), parts=True).step_parts
    assert parts.parts == [] and set(parts.left_out) == {*PARTS, "forward"}
    assert "no phase and token bucket" in parts.left_out["attention"]


@pytest.mark.parametrize("devices", [("cpu", "cuda"), ("modeled:h100", "modeled:h200"),
                                     ("emulated:h100", "modeled:h100")])
def test_arms_not_one_measured_and_one_modeled_are_unchanged(tmp_path, capsys, devices):
    a = make_run(tmp_path / "a", MEASURED, device=devices[0])
    b = make_run(tmp_path / "b", MODELED, device=devices[1])
    result = compare(arm(a), arm(b), parts=True)
    assert result.step_parts is None
    assert list(result.to_dict()) == OLD_KEYS
    assert main(["compare", str(a), "--", str(b)]) == 0
    assert "step parts" not in capsys.readouterr().out


def test_arms_differing_in_more_than_the_device_are_not_compared(tmp_path, capsys):
    a = make_run(tmp_path / "a", MEASURED, engine={"max_num_seqs": 8})
    b = make_run(tmp_path / "b", MODELED, device="modeled:h100", engine={"max_num_seqs": 16})
    parts = compare(arm(a), arm(b), parts=True).step_parts
    assert parts.parts == [] and "engine.max_num_seqs" in parts.not_compared
    assert main(["compare", str(a), "--", str(b)]) == 0
    assert "not compared: the arms differ in more than the device: engine.max_num_seqs" in \
        capsys.readouterr().out


def test_json_keeps_its_keys_and_adds_step_parts(pair, capsys):
    assert main(["compare", str(pair[0]), "--", str(pair[1]), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == OLD_KEYS + ["step_parts"]
    parts = out["step_parts"]
    assert {"measured_arm", "modeled_arm", "measured_device", "profile", "parts", "left_out",
            "not_compared", "note"} == set(parts)
    assert "H100 profile's device model" in parts["note"]
    assert [p["part"] for p in parts["parts"]] == [*PARTS, "forward"]
    bucket = parts["parts"][0]["buckets"][1]
    assert set(bucket) == {"phase", "tokens_from", "tokens_to", "steps_measured",
                           "steps_modeled", "measured_s", "modeled_s", "error", "low", "high"}
    assert bucket["error"] == pytest.approx(-0.5)


def test_text_says_which_arm_is_modeled_on_which_profile(pair, capsys):
    assert main(["compare", str(pair[0]), "--", str(pair[1])]) == 0
    text = capsys.readouterr().out
    assert "arm B is MODELED (the H100 profile's device model), arm A measured on " \
        "x86_64 (cpu)" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("attention")]
    assert rows[1][:8] == ["attention", "decode", "4-7", "0.003", "5", "0.0015", "3", "-50.0%"]
    assert rows[2][-1] == "have)" and f"{(5 * -0.5 + 3 * 0.2) / 8:+.1%}" in rows[2]


def test_a_factor_beyond_ten_prints_as_the_factor(tmp_path, capsys):
    measured = make_run(tmp_path / "m", [step(4, s=1.0) for _ in range(3)])
    modeled = make_run(tmp_path / "d", [step(4, s=2e-6)], device="modeled:h100")
    assert main(["compare", str(measured), "--", str(modeled)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("attention  decode"))
    assert "x2e-06" in row.split() and not np.isnan(float(row.split()[3]))


def test_the_runs_of_an_arm_pool_their_steps(pair, tmp_path):
    halves = [make_run(tmp_path / f"half{i}", MEASURED[i::2]) for i in (0, 1)]
    pooled = compare(arm(*halves), arm(pair[1]), parts=True).step_parts
    whole = compare(arm(pair[0]), arm(pair[1]), parts=True).step_parts
    def figures(parts):  # the interval resamples the rows in their order: not compared
        return [(p.part, p.error, p.steps_compared, p.steps_measured,
                 [(b.phase, b.tokens_from, b.steps_measured, b.steps_modeled, b.measured_s,
                   b.modeled_s, b.error) for b in p.buckets]) for p in parts.parts]

    assert repr(figures(pooled)) == repr(figures(whole))  # medians of the same rows; NaN too
