"""A run's summary in its peers' fields: `show --export aiperf` writes AIPerf's
profile_export_aiperf.json fields and `show --export llm-d` llm-d-benchmark's report v0.2,
each value a summary row's.

The names below were copied from the sources, not from harness/record/: aiperf 0.13.0's
wheel on PyPI (aiperf/common/models/export_models.py: `JsonExportData`, `JsonMetricResult`;
aiperf/metrics/types/*.py: each metric's `tag` and `display_unit`, else `unit`;
aiperf/common/enums/metric_enums.py: the units' tags), and llm-d-benchmark's
benchmark_report/schema_v0_2.py and base.py (`BenchmarkReportV02`, `Statistics`, `Units`)."""

import json

import pandas as pd
import pytest

from harness.commands import main
from tests.helpers import MODELED

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

# JsonExportData's fields written, and the metric tags with their (display) units
AIPERF_DOCUMENT = {"schema_version", "is_complete", "was_cancelled"}
AIPERF_UNITS = {"request_count": "requests", "error_request_count": "requests",
                "benchmark_duration": "sec", "request_throughput": "requests/sec",
                "output_token_throughput": "tokens/sec", "total_isl": "tokens",
                "total_osl": "tokens", "time_to_first_token": "ms",
                "inter_token_latency": "ms", "request_latency": "ms"}
AIPERF_RESULT = {"unit", "avg", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99",
                 "min", "max", "std", "count", "sum"}
# AIPerf's per-request ITL, (request latency - TTFT) / (OSL - 1), is steptrace's TPOT
AIPERF_FROM = {"time_to_first_token": "ttft", "inter_token_latency": "tpot",
               "request_latency": "e2e"}
AIPERF_STAT = {"avg": "mean", "min": "min", "p50": "p50", "p90": "p90", "p95": "p95",
               "p99": "p99", "max": "max"}

LLMD_STATISTICS = {"units", "mean", "mode", "stddev", "min", "p0p1", "p1", "p5", "p10", "p25",
                   "p50", "p75", "p90", "p95", "p99", "p99p9", "max"}
LLMD_TIME, LLMD_GEN_LATENCY = {"ms", "s"}, {"ms/token", "s/token"}
LLMD_LATENCY = {"time_to_first_token": (LLMD_TIME, "ttft"),
                "normalized_time_per_output_token": (LLMD_GEN_LATENCY, None),
                "time_per_output_token": (LLMD_GEN_LATENCY, "tpot"),
                "inter_token_latency": (LLMD_GEN_LATENCY, "itl"),
                "request_latency": (LLMD_TIME, "e2e")}
LLMD_THROUGHPUT = {"input_token_rate": ("tokens/s", None),
                   "output_token_rate": ("tokens/s", "output_tokens"),
                   "total_token_rate": ("tokens/s", "total_tokens"),
                   "requests_rate": ("queries/s", "requests")}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("peers")
    workload = root / "w.yaml"
    workload.write_text(MODELED + f"output: {root}\nname: small\n")
    assert main(["run", str(workload)]) == 0
    (folder,) = (root / "small").iterdir()
    return folder


def summary_rows(folder):
    table = pd.read_parquet(folder / "summary.parquet")
    return {(m, s): v for m, s, v in zip(table["metric"], table["stat"], table["value"])}


def exported(folder, kind, capsys):
    assert main(["show", str(folder), "--export", kind]) == 0
    return json.loads(capsys.readouterr().out)


def test_aiperf_export_has_aiperfs_names_units_and_the_summarys_values(run_dir, capsys):
    doc, rows = exported(run_dir, "aiperf", capsys), summary_rows(run_dir)
    assert doc["schema_version"] == "1.4" and doc["is_complete"] is True
    metrics = {k: v for k, v in doc.items() if k not in AIPERF_DOCUMENT}
    assert set(metrics) == set(AIPERF_UNITS)
    for tag, result in metrics.items():
        assert set(result) <= AIPERF_RESULT and result["unit"] == AIPERF_UNITS[tag], tag
    for tag, ours in AIPERF_FROM.items():
        for theirs, stat in AIPERF_STAT.items():
            assert metrics[tag][theirs] == pytest.approx(rows[(ours, stat)] * 1000), (tag, stat)
        assert metrics[tag]["count"] == rows[(ours, "count")]
    assert metrics["request_count"]["avg"] == rows[("requests", "finished")] == 12
    assert metrics["benchmark_duration"]["avg"] == rows[("window", "duration")]
    assert metrics["total_osl"]["avg"] == rows[("tokens", "output")]


def test_llmd_export_is_a_v0_2_report_of_the_summarys_values(run_dir, capsys):
    doc, rows = exported(run_dir, "llm-d", capsys), summary_rows(run_dir)
    assert set(doc) <= {"version", "run", "scenario", "results"} and doc["version"] == "0.2"
    assert set(doc["run"]) <= {"uid", "eid", "cid", "time", "user"}
    assert doc["run"]["uid"] == run_dir.name
    assert doc["run"]["time"]["duration"].startswith("PT")
    assert set(doc["results"]) <= {"request_performance", "observability", "profiling"}
    aggregate = doc["results"]["request_performance"]["aggregate"]
    assert set(aggregate) <= {"requests", "latency", "throughput"}
    assert aggregate["requests"] == dict(total=12, failures=0, incomplete=0)
    assert set(aggregate["latency"]) <= set(LLMD_LATENCY)
    for name, stats in aggregate["latency"].items():
        units, ours = LLMD_LATENCY[name]
        assert set(stats) <= LLMD_STATISTICS and "mean" in stats and stats["units"] in units
        for stat in ("mean", "min", "p50", "p90", "p95", "p99", "max"):
            assert stats[stat] == pytest.approx(rows[(ours, stat)]), (name, stat)
    assert set(aggregate["latency"]) == {"time_to_first_token", "time_per_output_token",
                                         "inter_token_latency", "request_latency"}
    for name, stats in aggregate["throughput"].items():
        units, ours = LLMD_THROUGHPUT[name]
        assert stats == dict(units=units, mean=pytest.approx(rows[("throughput", ours)]))
    assert len(aggregate["throughput"]) == 3
