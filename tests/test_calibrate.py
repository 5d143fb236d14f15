"""steptrace calibrate on the CPU: the grid, a table that reads back as full grids of
measured times, GEMM times that grow with tokens, bad input (exit 2, nothing written) and
--json."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.kernels.table import read
from engine.model_config import load_model_config
from harness.commands import main
from harness.run import kernel_calibration as kc
from tests.device import measured_profile

REPO = Path(__file__).resolve().parents[1]
QUICK = ["--device", "cpu", "--tokens-max", "8", "--repeats", "2", "--contexts", "64,16"]
# wq_a and shared gate/up, wq_b, wkv_a, wkv_b, wo, dense gate/up, dense down and eh_proj,
# shared down, router, LM head
TINY_GEMMS = {(32, 64), (96, 32), (40, 64), (128, 32), (64, 64), (128, 64), (64, 128),
              (64, 32), (8, 64), (256, 64)}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """The tiny model's table, written over an older file; the --json document."""
    folder = tmp_path_factory.mktemp("calibrate")
    out = folder / "tiny.csv"
    out.write_text("an older table\n")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["calibrate", *QUICK, "--out", str(out), "--json"]) == 0
    return out, json.loads(stdout.getvalue())


def test_the_grid_is_powers_of_two_up_to_the_cap():
    grid = kc.make_grid(100, [64, 16, 64])
    assert grid.tokens == (1, 2, 4, 8, 16, 32, 64) == grid.decode_sequences
    assert (grid.decode_contexts, grid.prefill_contexts) == ((16, 64), (0, 16, 64))
    assert kc.make_grid(4096).decode_sequences[-1] == kc.DECODE_SEQUENCES_MAX
    for bad in ((0, [16]), (8, []), (8, [0])):
        with pytest.raises(ValueError):
            kc.make_grid(*bad)


def test_the_table_reads_back_as_full_grids(calibrated):
    out, _ = calibrated
    table = read(out)  # read() refuses a curve that is not a full grid
    assert {r.family for r in table.rows} == {"gemm", "moe", "mla_decode", "mla_prefill"}
    assert all(r.time_us > 0 and r.source == "measured" and r.precision == "bf16"
               for r in table.rows)
    curves = table.curves()
    gemms = {(r.n, r.k) for r in table.rows if r.family == "gemm"}
    assert gemms == TINY_GEMMS
    heads = load_model_config("tiny").num_attention_heads
    contexts = {"gemm": {0}, "moe": {0}, "mla_decode": {16, 64}, "mla_prefill": {0, 16, 64}}
    for rows in curves.values():
        family = rows[0].family
        assert {r.context for r in rows} == contexts[family]
        assert {r.tokens for r in rows} == {1, 2, 4, 8}
        if family.startswith("mla"):
            assert rows[0].heads == heads
    moe = next(rows for rows in curves.values() if rows[0].family == "moe")[0]
    assert (moe.n, moe.k, moe.experts, moe.topk, moe.width) == (64, 32, 8, 2, 1)
    assert table.stack.startswith("steptrace ") and " torch " in table.stack
    assert table.source.startswith("measured by steptrace calibrate on ")
    assert table.notice == kc.NOTICE
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left


def test_json_says_what_was_written(calibrated):
    out, doc = calibrated
    table = read(out)
    assert doc["table"] == str(out) and doc["rows"] == len(table.rows)
    assert doc["families"] == {"gemm": 40, "moe": 4, "mla_decode": 8, "mla_prefill": 12}
    assert doc["seconds"] > 0 and doc["model"] == "tiny" and doc["device"] == "cpu"
    assert (doc["profile"], doc["stack"]) == (table.profile, table.stack)


def test_a_gemm_takes_longer_at_more_tokens_on_a_large_shape():
    """Loosely, on a shared host: one thread (no stall waiting for a busy core), and the
    best of three tries."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ratios = []
        with kc.building("cpu"):
            linear = kc.nn.Linear(512, 512, bias=False)
            for _ in range(3):
                rows = kc.gemm_rows(kc.Clock("cpu", 7), {(512, 512): linear}, (1, 2048))
                one, many = (r.time_us for r in sorted(rows, key=lambda r: r.tokens))
                ratios.append(many / one)
                if ratios[-1] > 2:
                    break
    finally:
        torch.set_num_threads(threads)
    assert max(ratios) > 2, ratios


@pytest.mark.parametrize("argv, words", [
    (["--out", "t.txt"], "expected a FILE.csv path"),
    (["--out", "missing/t.csv"], "no folder"),
    (["--out", "folder.csv"], "is a directory, not a regular file"),
    (["--tokens-max", "0"], "--tokens-max must be an integer in 1..1048576, got 0"),
    (["--tokens-max", "x"], "invalid int value: 'x'"),
    (["--repeats", "0"], "--repeats must be an integer in 1..10000, got 0"),
    (["--contexts", "0,16"], "--contexts '0,16': expected KV lengths"),
    (["--contexts", "a"], "--contexts 'a': expected KV lengths"),
    (["--model", "nonesuch"], "unknown model 'nonesuch'"),
    (["--model", "deepseek-v4-flash"], "implements deepseek_v3 blocks, not deepseek_v4"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "t.csv").write_text("kept\n")
    out = [] if "--out" in argv else ["--out", "t.csv"]
    assert main(["calibrate", "--device", "cpu", *out, *argv, "--json"]) == 2
    captured = capsys.readouterr()
    assert words in captured.err and len(captured.err.strip().splitlines()) == 1
    assert json.loads(captured.out)["exit_code"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.csv", "t.csv"]
    assert (tmp_path / "t.csv").read_text() == "kept\n"


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as done:
        main(["calibrate", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert all(o in text for o in ("--out", "--model", "--device", "--tokens-max", "--contexts",
                                   "--repeats", "--json"))


@pytest.mark.slow
def test_two_ranks_time_the_collectives(tmp_path):
    out = tmp_path / "ranks.csv"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "-m", "harness.commands", "calibrate",
                           "--device", "cpu", "--tokens-max", "2", "--repeats", "2",
                           "--contexts", "16", "--out", str(out), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["families"]["all_reduce"] == 2  # rank 0's document only
    table = read(out)
    for family in ("all_reduce", "all_gather"):
        rows = [r for r in table.rows if r.family == family]
        assert [(r.tokens, r.width, r.topology) for r in sorted(rows, key=lambda r: r.tokens)] \
            == [(1, 2, "scaleup"), (2, 2, "scaleup")]


def test_an_absent_device_is_bad_input(tmp_path, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    assert main(["calibrate", "--device", "cuda", "--out", str(tmp_path / "t.csv")]) == 2
    assert "--device cuda: device 'cuda' requested" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_measured_table_times_a_modeled_run_compared_part_by_part(tmp_path):
    """tests/device/run_checks.sh's step 4 on the CPU: the table calibrate wrote times a
    modeled profile's attention, dense and expert parts, and `steptrace compare` sets each
    beside the same workload measured on the device."""
    table, profile = tmp_path / "k.csv", tmp_path / "measured.yaml"
    assert main(["calibrate", "--model", "tiny", "--device", "cpu", "--out", str(table),
                 "--tokens-max", "64", "--contexts", "64,512"]) == 0
    assert measured_profile.main([str(table), str(profile), "--profile", "H100"]) == 0
    runs = {}
    for arm, device in (("measured", "cpu"), ("modeled", f"modeled:{profile}")):
        runs[arm] = tmp_path / arm
        assert main(["run", "workloads/quickstart.yaml", "--set", f"device={device}",
                     "--set", "trace.limit=30", "--set", "deployment={devices: 1}",
                     "--set", f"output={runs[arm]}"]) == 0
    manifest = json.loads(next(runs["modeled"].glob("*/*/manifest.json")).read_text())
    assert manifest["step_model"]["timed"] == ["attention", "dense", "experts"]
    assert main(["compare", str(runs["measured"]), "--", str(runs["modeled"]), "--json"]) == 0
