"""docs/modeling.md's validation tables say what the workloads under workloads/validation/
model: each row's workload is run and the figures read from its summary must equal the
table's "modeled" cells (and, for a P/D row, its TTFT, KV transfer and decode wait) within
their printed rounding."""

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from engine.devices.profile import load_device_profile
from engine.model_config import load_model_config
from harness.commands import main
from harness.record.run import Run

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "modeling.md"
ROWS = REPO / "workloads" / "validation"
# Rows left out to keep this file near 30 s on a busy 2-core machine: those docs/modeling.md
# marks slow (over 20 s) and, at 5 - 15 s each, the rest of their kinds. Their figures were
# checked by running each row's command.
SLOW = {"DS-prodD", "TRT-T", "LL-EP128", "LL-EP256",
        "DS-D", "SG-D", "LL-EP16", "LL-EP32", "LL-EP64", "N-EP32", "N-EP64"}


def tables(heading):
    """The rows of the markdown tables under `## <heading>` (until the next `## `), as
    dicts of header -> cell, with the row's file (the backticked .yaml) under `file` and the
    overrides it names (backticked `--set KEY=VALUE`) under `sets`."""
    section = DOC.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows, header = [], None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            row = dict(zip(header, cells))
            row["file"] = re.search(r"`([\w.]+\.yaml)`", line).group(1)
            row["sets"] = re.findall(r"`--set (\S+)`", line)
            row["id"] = row["row"].split()[0]
            rows.append(row)
    return rows


def figures(cell):
    """The numbers a cell prints, each with half its last digit's unit: "2,577; 50.9 ms"
    -> [(2577, 0.5), (50.9, 0.05)]."""
    out = []
    for text in re.findall(r"[\d,]+(?:\.\d+)?", cell):
        decimals = len(text.split(".")[1]) if "." in text else 0
        out.append((float(text.replace(",", "")), 0.5 * 10 ** -decimals))
    return out


def run(tmp_path, monkeypatch, file, sets=()):
    monkeypatch.chdir(REPO)  # rows name their model and device files from the repository
    overrides = [arg for item in (*sets, f"output={tmp_path}") for arg in ("--set", item)]
    assert main(["run", str(ROWS / file), *overrides]) == 0
    run_dir, = (p.parent for p in tmp_path.glob("*/*/manifest.json"))
    summary = {(r["metric"], r["stat"]): r["value"] for r in Run.read(run_dir).result()["summary"]}
    return yaml.safe_load((ROWS / file).read_text()), summary


def modeled(row, workload, summary):
    """The row's modeled figures as docs/modeling.md reads them: per device, input tokens
    of a prompt engine or output tokens otherwise (then TPOT p50 in ms); per user for the
    batch-1 row. The devices are the row's `--set deployment.devices` where it sets them."""
    sets = dict(item.split("=", 1) for item in row["sets"])
    devices = int(sets.get("deployment.devices", workload["deployment"]["devices"]))
    if workload["engine"].get("engine_type") == "prompt":
        prompt = workload["trace"]["generate"]["prompt"]["fixed"]
        return [summary[("throughput", "requests")] * prompt / devices]
    if workload["engine"]["max_num_seqs"] == 1:  # minimum latency: one user's tokens per s
        return [summary[("throughput", "output_tokens")]]
    return [summary[("throughput", "output_tokens")] / devices,
            summary[("tpot", "p50")] * 1e3]


PD_TERMS = "TTFT; KV transfer; decode wait (p50)"  # the P/D table's own column
PD = [r for r in tables("Validation") if PD_TERMS in r]
DEPLOYMENTS = [r for r in tables("Validation") if PD_TERMS not in r]
ALL_TO_ALLS = tables("The communication term alone")


def pd_modeled(row, summary):
    """A P/D row's figures as docs/modeling.md reads them: the prefill pool's input tokens
    per second per node of 8 GPUs (or per NPU), then, where the row prints one, the prefill
    prefix-cache hit rate in %; and its P/D terms: TTFT p50 (s), KV transfer and decode wait
    p50 (ms)."""
    if "total tok/s per GPU" in row["modeled"]:  # InferenceX's: every token over every GPU
        got = [summary[("per_device", "total_tokens")]]
    else:
        per = 8 if "per node" in row["modeled"] else 1
        got = [summary[("per_device", "input_tokens_per_prefill_device")] * per]
    if "hit rate" in row["modeled"]:
        got.append(summary[("prefill_prefix_cache", "hit_rate")] * 100)
    terms = [summary[("ttft", "p50")], summary[("kv_transfer", "p50")] * 1e3,
             summary[("decode_wait", "p50")] * 1e3]
    return got, terms


def test_the_tables_hold_every_validation_workload():
    named = {r["file"] for r in DEPLOYMENTS + PD + ALL_TO_ALLS}
    assert named == {p.name for p in ROWS.glob("*.yaml")}
    assert {r["id"] for r in DEPLOYMENTS + PD + ALL_TO_ALLS} >= SLOW


def test_pd_rows_run_both_pools_and_print_their_terms_in_order():
    assert len(PD) >= 3
    for row in PD:
        workload = yaml.safe_load((ROWS / row["file"]).read_text())
        assert {"prefill", "decode"} <= set(workload["deployment"]), row["id"]
        assert re.fullmatch(r"[\d.]+ s; [\d.]+ ms; [\d.]+ ms", row[PD_TERMS]), row["id"]
        assert re.search(r"(input tok/s per (node|NPU)|total tok/s per GPU)", row["modeled"]), \
            row["id"]


@pytest.mark.slow
@pytest.mark.parametrize("row", [r for r in DEPLOYMENTS if r["id"] not in SLOW],
                         ids=lambda r: r["id"])
def test_deployment_rows_model_what_the_table_says(row, tmp_path, monkeypatch):
    workload, summary = run(tmp_path, monkeypatch, row["file"], row["sets"])
    got = modeled(row, workload, summary)
    printed = figures(row["modeled"].replace(" ms", ""))
    assert len(printed) <= len(got)
    for value, (number, half) in zip(got, printed):
        assert abs(value - number) <= half, (row["id"], got, row["modeled"])


@pytest.mark.slow
@pytest.mark.parametrize("row", [r for r in PD if r["id"] not in SLOW], ids=lambda r: r["id"])
def test_pd_rows_model_what_the_table_says(row, tmp_path, monkeypatch):
    # both pools in one run; the prefill pool busy from its first step to its last
    _, summary = run(tmp_path, monkeypatch, row["file"], row["sets"])
    got, terms = pd_modeled(row, summary)
    for cell, values in ((row["modeled"], got), (row[PD_TERMS], terms)):
        printed = figures(cell)
        assert len(printed) == len(values), (row["id"], cell)
        for value, (number, half) in zip(values, printed):
            assert abs(value - number) <= half, (row["id"], values, cell)


@pytest.mark.slow
@pytest.mark.parametrize("row", [r for r in ALL_TO_ALLS if r["id"] not in SLOW],
                         ids=lambda r: r["id"])
def test_all_to_all_rows_model_what_the_table_says(row, tmp_path, monkeypatch):
    # one MoE layer, one micro-batch: a step's dispatch and combine are one all-to-all each;
    # the largest is the step with every rank at its full tokens (arrivals ramp up and down)
    _, summary = run(tmp_path, monkeypatch, row["file"])
    for part in ("dispatch", "combine"):
        (number, half), = figures(row[f"modeled {part}"])
        value = summary[(part, "max")]
        if "GB/s" in row[f"modeled {part}"]:  # normal kernels: the link's bytes / the time
            (mb, _), = figures(row[f"{part} MB"])
            value = mb * 1e6 / (value * 1e-6) / 1e9
        assert abs(value - number) <= half, (row["id"], part, value, row[f"modeled {part}"])


def test_the_deepep_layer_and_rdma_profile_are_deepseek_v3_and_h800():
    """The DeepEP rows change only what the published benchmark changes."""
    layer = load_model_config(ROWS / "deepep" / "deepseek-v3-moe-layer.yaml")
    v3 = load_model_config("deepseek-v3")
    assert layer == replace(v3, name=layer.name, source=layer.source, num_hidden_layers=1,
                            first_k_dense_replace=0, num_nextn_predict_layers=0)
    rdma = load_device_profile(ROWS / "deepep" / "h800-rdma.yaml")
    h800 = load_device_profile("H800")
    assert rdma.scaleup_devices.value == 1
    assert rdma == replace(h800, name=rdma.name, scaleup_devices=rdma.scaleup_devices)
