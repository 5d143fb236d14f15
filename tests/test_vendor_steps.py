"""aiconfigurator's own step estimates (workloads/validation/kernels/aiconfigurator_steps.csv,
written by engine/kernels/vendor_steps.py): the committed file reads, covers every NVIDIA
profile at and between grid points, and its parts add up to its steps; the script refuses
plainly without aiconfigurator-core 0.12.0. Needs no aiconfigurator."""

import csv
import subprocess
import sys
from collections import defaultdict
from importlib import metadata
from pathlib import Path

import pytest

from engine.devices.profile import load_device_profile
from engine.kernels import vendor_steps

REPO = Path(__file__).resolve().parents[1]
CSV = REPO / "workloads" / "validation" / "kernels" / "aiconfigurator_steps.csv"
CSV_V4 = CSV.with_name("aiconfigurator_steps_v4.csv")
ROUNDING_MS = 0.5e-4  # each part and step_ms is written to 4 decimals


def read(path=CSV):
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def parts(row):
    return {k: float(v) for k, v in row.items() if k.startswith("part_") and v != ""}


@pytest.mark.parametrize("path", [CSV, CSV_V4], ids=["v3", "v4"])
def test_the_columns_come_in_order_then_one_part_each(path):
    header = next(csv.reader(line for line in path.open() if not line.startswith("#")))
    assert tuple(header[:len(vendor_steps.COLUMNS)]) == vendor_steps.COLUMNS
    assert all(c.startswith("part_") for c in header[len(vendor_steps.COLUMNS):])


def test_every_device_is_a_steptrace_profile_with_enough_shapes_of_the_required_stack():
    count = defaultdict(int)
    for row in read():
        if row["stack"].startswith(vendor_steps.REQUIRED_STACK + " "):
            count[row["device"], row["phase"]] += 1
    for device in vendor_steps.DEVICES:
        assert load_device_profile(device.lower()).name == device
        assert count[device, "decode"] >= 30 and count[device, "prefill"] >= 15, device


def test_shapes_lie_between_the_grid_points_too():
    rows = [r for r in read() if r["device"] == "B200" and r["stack"].startswith("trtllm")]
    decode = {(int(r["sequences_per_gpu"]), int(r["context"])) for r in rows
              if r["phase"] == "decode"}
    assert {(3, 3000), (24, 6000), (96, 2048), (192, 8192)} <= decode
    prefill = [r for r in rows if r["phase"] == "prefill"]
    assert all(int(r["prompt_tokens_per_gpu"]) == int(r["sequences_per_gpu"]) * int(r["context"])
               for r in prefill)
    assert {3000, 6000} <= {int(r["context"]) for r in prefill}


@pytest.mark.parametrize("path", [CSV, CSV_V4], ids=["v3", "v4"])
def test_steps_are_positive_and_their_parts_sum_to_them(path):
    """Parts add up to the step: an overlap's streams are both listed and
    part_overlap_hidden (never positive) takes back the shorter one."""
    for row in read(path):
        step, split = float(row["step_ms"]), parts(row)
        assert step > 0, row
        assert split.get("part_overlap_hidden", 0.0) <= 0, row
        assert all(v >= 0 for k, v in split.items() if k != "part_overlap_hidden"), row
        assert sum(split.values()) == pytest.approx(step, abs=ROUNDING_MS * (len(split) + 1))


def test_v4_is_the_fp8_checkpoint_on_every_stack_and_device_that_collected_its_modules():
    """TensorRT-LLM's V4 attention modules exist at its `next` version on SM100 alone; no
    expert-compute table covers V4's shape, so every graph is the fused one."""
    rows = read(CSV_V4)
    got = {(r["device"], r["stack"]) for r in rows}
    assert got == {(d, s) for d in vendor_steps.DEVICES for s in ("trtllm 1.3.0rc23",
                                                                   "sglang 0.5.14")
                   if not (d.startswith("H") and s.startswith("trtllm"))}
    assert {(r["precision_gemm"], r["precision_moe"], r["precision_kv"], r["moe_comm"])
            for r in rows} == {("fp8_block", "fp8_block", "fp8", "fused")}
    assert {"part_attention", "part_mhc_pre", "part_mhc_post"} <= set(rows[0])


def test_the_pdl_discount_is_on_trtllm_large_ep_decode_rows_alone():
    for row in read():
        discounted = (row["stack"].startswith("trtllm") and row["phase"] == "decode"
                      and row["moe_comm"] != "fused")
        assert float(row["pdl_factor"]) == (0.9 if discounted else 1.0), row


def test_a_decode_step_grows_from_the_grid_s_short_corner_to_its_long_ones():
    """Corner to corner only: aiconfigurator's own tables are not monotone between
    neighbours (B200 trtllm, one sequence: 1.15 ms of attention at 4096 keys, 0.94 at 8192)."""
    steps = {(r["device"], r["stack"], int(r["sequences_per_gpu"]), int(r["context"])):
             float(r["step_ms"]) for r in read() if r["phase"] == "decode"}
    for (device, stack, n, context), ms in steps.items():
        if (n, context) == (1, 1024):
            assert ms < steps[device, stack, 1, 8192] < steps[device, stack, 256, 8192]
            assert ms < steps[device, stack, 256, 1024] < steps[device, stack, 256, 8192]


@pytest.mark.parametrize("found", [None, "0.11.0"])
def test_the_script_refuses_in_one_line_without_aiconfigurator_0_12(monkeypatch, found):
    def version(name):
        if found is None:
            raise metadata.PackageNotFoundError(name)
        return found
    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(SystemExit) as refusal:
        vendor_steps.load_aiconfigurator()
    message = str(refusal.value)
    assert "\n" not in message and "0.12.0" in message and (found or "not installed") in message


def test_the_command_needs_an_out_path():
    done = subprocess.run([sys.executable, "-m", "engine.kernels.vendor_steps"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--out" in done.stderr
