"""The server table of a run against an endpoint: its /metrics scraped during the run,
each sample a row on the run's clock, vLLM's and SGLang's names for one figure under one
name of steptrace's; an endpoint without /metrics or with text not in Prometheus' format
leaves the table empty, the manifest saying why, and the run goes on."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from harness.record.prometheus import Malformed, samples
from harness.schema import LABELS, arrow_schema
from tests.serving import ONE_TOKEN_EVENTS, client_run, served

SGLANG = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3.0
sglang:num_queue_reqs{model_name="m"} 2.0
sglang:token_usage{model_name="m"} 0.25
sglang:generation_tokens_total{model_name="m"} 1.5e+03
sglang:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 7.0
"""
TRACE = "trace:\n  generate: {requests: 4, rate: 20, output: {fixed: 4}}\n"


def test_the_text_format_is_read_with_its_escapes_and_malformed_text_refused():
    text = ('# TYPE x counter\n\nx_total 3 1700000000000\n'
            'y{z="a\\"b",a="c\\\\d\\ne",} +Inf\nup NaN\n')
    (x, y, up) = samples(text)
    assert x == ("x_total", "", 3.0)
    assert y == ("y", 'a="c\\\\d\\ne",z="a\\"b"', float("inf"))
    assert up[0] == "up" and up[2] != up[2]
    for bad in ("x", "x{a=b} 1", "x 1 2 3", "x{a=\"1\"b=\"2\"} 1", "<html>"):
        with pytest.raises(Malformed, match="line 1"):
            samples(bad)


def test_against_serve_the_scrapes_follow_the_run(tmp_path):
    pytest.importorskip("aiohttp")
    (tmp_path / "server").mkdir()
    trace = ("trace:\n  generate: {requests: 8, rate: 10, arrival: constant, "
             "prompt: {fixed: 16}, output: {fixed: 20}}\n")
    with served(tmp_path / "server", text=ONE_TOKEN_EVENTS) as (url, _):
        run = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny, '
                                   f'metrics_interval_s: 0.1}}', trace)
    said, rows = run.manifest.target["metrics"], run.table("server")
    assert pq.read_schema(run.path / "server.parquet").remove_metadata() == \
        arrow_schema("server", LABELS)
    assert said["url"] == f"{url}/metrics" and "stopped" not in said
    assert said["scrapes"] >= 5 and said["samples"] == len(rows)
    assert rows["t_s"].is_monotonic_increasing and rows["t_s"].iloc[0] < 0.5
    assert {"running", "waiting", "kv_cache_usage", "generation_tokens"} <= set(rows["metric"])
    running = rows[rows["metric"] == "running"]
    assert (running["name"] == "vllm:num_requests_running").all()
    assert (running["labels"] == 'model_name="tiny"').all()
    # the last scrape follows the last request: every token generated counted
    generated = rows[rows["metric"] == "generation_tokens"]["value"]
    assert generated.is_monotonic_increasing and generated.iloc[-1] == 8 * 20
    assert run.table("requests")["status"].eq("finished").all()


def run_against(tmp_path, status: int, text: str, interval: str = "0.05"):
    pytest.importorskip("aiohttp")
    from tests.serving import aiohttp_endpoint, endpoint_with_metrics

    with aiohttp_endpoint(endpoint_with_metrics(status, text)) as url:
        run = client_run(tmp_path, f'{{endpoint: "{url}/v1", model: m, '
                                   f'metrics_interval_s: {interval}}}', TRACE)
    assert run.complete and run.table("requests")["status"].eq("finished").all()
    return url, run.manifest.target["metrics"], run.table("server")


def test_sglang_names_are_read_under_steptraces(tmp_path):
    url, said, rows = run_against(tmp_path, 200, SGLANG)
    assert said["url"] == f"{url}/metrics"  # at the root, not under the endpoint's /v1
    first = rows[rows["t_s"] == rows["t_s"].min()]
    assert first["metric"].tolist() == ["running", "waiting", "kv_cache_usage",
                                        "generation_tokens",
                                        "sglang:time_to_first_token_seconds_bucket"]
    assert first["value"].tolist() == [3.0, 2.0, 0.25, 1500.0, 7.0]
    assert first["labels"].iloc[-1] == 'le="+Inf",model_name="m"'
    assert said["scrapes"] >= 2 and len(rows) == 5 * said["scrapes"]


@pytest.mark.parametrize("status, text, why", [
    (404, "404: Not Found", "HTTP 404"),
    (200, "<html><body>metrics</body></html>", "not Prometheus' text format"),
])
def test_no_metrics_leaves_the_table_empty_saying_why(tmp_path, status, text, why):
    _, said, rows = run_against(tmp_path, status, text)
    assert len(rows) == 0 and said["scrapes"] == 0 and said["stopped"].startswith(why)
    assert list(rows.columns[:5]) == ["t_s", "metric", "name", "labels", "value"]


def test_a_null_interval_scrapes_nothing(tmp_path):
    _, said, rows = run_against(tmp_path, 200, SGLANG, "null")
    assert len(rows) == 0 and said == {"off": "target.metrics_interval_s: null"}
