"""A run's summary in vLLM's words: `show --vllm` prints vLLM's serving benchmark block and
result.json (in every run folder) holds its result fields, each read from the run's summary
rows (docs/metrics.md, "In vLLM's words")."""

import json

import pandas as pd
import pytest

from harness.commands import main
from harness.replay import driver as replay_module
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from tests.helpers import MODELED

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

# vLLM's result fields (vllm/benchmarks/serve.py, `benchmark()`'s result and
# process_one_metric) and the summary rows each one is: (metric, stat), scale
FIELDS = {"completed": ([("requests", "finished"), ("requests", "handed_off")], 1),
          "failed": ([("requests", "rejected"), ("requests", "unfinished")], 1),
          "duration": ([("window", "duration")], 1),
          "total_input_tokens": ([("tokens", "input")], 1),
          "total_output_tokens": ([("tokens", "output")], 1),
          "request_throughput": ([("throughput", "requests")], 1),
          "request_goodput": ([("goodput", "requests")], 1),
          "output_throughput": ([("throughput", "output_tokens")], 1),
          "total_token_throughput": ([("throughput", "total_tokens")], 1),
          **{f"{vllm}_{name}_ms": ([(metric, ours)], 1000)
             for name, metric in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"),
                                  ("e2el", "e2e"))
             for vllm, ours in (("mean", "mean"), ("median", "p50"), ("p99", "p99"))}}
LABELS = {"completed": "Successful requests:", "failed": "Failed requests:",
          "duration": "Benchmark duration (s):", "total_input_tokens": "Total input tokens:",
          "total_output_tokens": "Total generated tokens:",
          "request_throughput": "Request throughput (req/s):",
          "request_goodput": "Request goodput (req/s):",
          "output_throughput": "Output token throughput (tok/s):",
          "total_token_throughput": "Total token throughput (tok/s):",
          "mean_ttft_ms": "Mean TTFT (ms):", "median_ttft_ms": "Median TTFT (ms):",
          "p99_ttft_ms": "P99 TTFT (ms):", "mean_tpot_ms": "Mean TPOT (ms):",
          "median_tpot_ms": "Median TPOT (ms):", "p99_tpot_ms": "P99 TPOT (ms):",
          "mean_itl_ms": "Mean ITL (ms):", "median_itl_ms": "Median ITL (ms):",
          "p99_itl_ms": "P99 ITL (ms):", "mean_e2el_ms": "Mean E2EL (ms):",
          "median_e2el_ms": "Median E2EL (ms):", "p99_e2el_ms": "P99 E2EL (ms):"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm")
    workload = root / "w.yaml"
    workload.write_text(MODELED + f"output: {root}\nname: small\nslo: {{ttft: 1}}\n")
    assert main(["run", str(workload), "--set", "engine.num_mtp=1"]) == 0
    (folder,) = (root / "small").iterdir()
    return folder


def summary_rows(folder):
    table = pd.read_parquet(folder / "summary.parquet")
    return {(m, s): v for m, s, v in zip(table["metric"], table["stat"], table["value"])}


def expected(rows, name):
    keys, scale = FIELDS[name]
    return sum(rows[k] for k in keys) * scale


def test_result_json_holds_vllms_fields_from_the_summary(run_dir):
    result = json.loads((run_dir / "result.json").read_text())
    rows = summary_rows(run_dir)
    for name in FIELDS:
        assert result[name] == pytest.approx(expected(rows, name), rel=1e-12), name
    for name in ("completed", "failed", "total_input_tokens", "total_output_tokens"):
        assert isinstance(result[name], int)
    assert result["completed"] == 12 and result["total_output_tokens"] > 12
    assert result["steptrace"]["rows"]["mean_tpot_ms"] == "tpot.mean"
    assert result["steptrace"]["complete"] and result["steptrace"]["modeled"]
    assert result["model_id"] == "deepseek-v3" and result["num_prompts"] == 12
    assert not list(run_dir.glob(".*tmp"))  # written whole


def test_show_prints_vllms_block(run_dir, capsys):
    assert main(["show", "--vllm", str(run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("============ Serving Benchmark Result ============")
    block = lines[start:start + 30]
    assert "-----Time per Output Token (excl. 1st token)------" in block
    assert block[block.index("=" * 50) - 1].startswith("P99 E2EL (ms):")
    result = json.loads((run_dir / "result.json").read_text())
    printed = {line[:40].strip(): line[41:].strip() for line in block if len(line) > 40}
    for name, label in LABELS.items():
        value = result[name]
        assert printed[label] == (str(value) if isinstance(value, int) else f"{value:.2f}")


def test_show_vllm_json_is_the_result_file(run_dir, capsys):
    assert main(["show", "--vllm", "--json", str(run_dir)]) == 0
    data = json.loads(capsys.readouterr().out)
    notes = data.pop("notes")
    assert data == json.loads((run_dir / "result.json").read_text())
    assert all(isinstance(n, str) for n in notes)


def test_an_interrupted_run_writes_it_from_what_it_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(replay_module, "PROGRESS_EVERY", 1)

    def ctrl_c_after_four(done, total):
        if done >= 4:
            raise KeyboardInterrupt
    path = tmp_path / "w.yaml"
    path.write_text(MODELED.replace("requests: 12", "requests: 40")
                    + f"output: {tmp_path}\nname: small\n")
    (run,) = run_workload(load_workload(path), ctrl_c_after_four)
    folder = run.path
    result = json.loads((folder / "result.json").read_text())
    rows = summary_rows(folder)
    assert result["steptrace"]["complete"] is False
    assert result["failed"] == expected(rows, "failed") > 0
    assert result["completed"] == expected(rows, "completed")
    assert result["request_goodput"] is None  # no SLO given: vLLM writes null too
    assert result["mean_ttft_ms"] == pytest.approx(expected(rows, "mean_ttft_ms"))
