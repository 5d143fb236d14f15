"""`steptrace serve` and its client under load (docs/serving.md, "Speed"): the server's own
latency per token at 256 concurrent streams, the client's send lag at 1,000 req/s, and the
served engine thread's step time against `steptrace run`'s at the same load, measured in
one run. The server is a `steptrace serve` process of its own; the client, steptrace's
(a workload's `target`), runs in this one.

Run: python -m pytest tests/bench/test_serve_bench.py -m slow --benchmark-enable -s
In the slow tier (benchmarks disabled) each case runs once, on a short trace.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.slow  # starts `steptrace serve` processes

from harness.analysis.interval import noise_floor, ratio  # noqa: E402
from harness.commands import main  # noqa: E402
from harness.record.run import Run  # noqa: E402
from tests.helpers import MODELED, REPO  # noqa: E402
from tests.serving import SERVED, client_run, workload_file  # noqa: E402

STREAMS = 256
# A modeled DeepSeek-V3 on 8 H200s (tests/helpers.py's MODELED) less its trace, sized for
# 256 streams of 64 + 32 tokens; one token an event (a step commits one token)
SERVED_TRACE = SERVED[:SERVED.index("engine:")]
ENGINE = MODELED[MODELED.index("engine:"):].replace(
    "engine: {max_num_batched_tokens: 256, num_kv_blocks: 256}",
    "engine: {max_num_batched_tokens: 4096, num_kv_blocks: 2048, block_size: 16}") + \
    "mtp_acceptance: 0\n"


@contextmanager
def serve_process(root: Path, engine: str = ENGINE):
    """`steptrace serve` of `engine` on a free port, a process of its own; yields (its url,
    a list its run is put in once SIGTERM has stopped it)."""
    command = [sys.executable, "-m", "harness.commands", "serve",
               str(workload_file(root, SERVED_TRACE + engine)), "--port", "0",
               "--max-concurrency", "1024"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    runs: list = []
    try:
        lines: list = []
        for line in process.stderr:
            lines.append(line)
            match = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            if match:
                threading.Thread(target=lambda: lines.extend(process.stderr),
                                 daemon=True).start()
                break
        assert match, "".join(lines)
        yield match.group(1), runs
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    runs.append(Run.read(next((root / "results" / "served").iterdir())))


def trace(requests: int, rate: int, prompt: int, output: int) -> str:
    return (f"trace:\n  generate: {{requests: {requests}, rate: {rate}, arrival: constant, "
            f"prompt: {{fixed: {prompt}}}, output: {{fixed: {output}}}}}\n")


def delivery_mean_s(url: str) -> float:
    """The mean of `steptrace:token_delivery_seconds` (docs/serving.md, "Metrics")."""
    with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    got = {name: float(value) for name, value in re.findall(
        r"^steptrace:token_delivery_seconds_(sum|count)\{[^}]*\} (\S+)$", text, re.M)}
    return got["sum"] / got["count"]


def local_run(root: Path, body: str, name: str, engine: str = ENGINE) -> Run:
    """`steptrace run` of the served engine on `body`'s trace and load."""
    path = root / f"{name}.yaml"
    path.write_text(engine + body + f"output: {root / 'results'}\nname: {name}\n")
    assert main(["run", str(path)]) == 0
    return Run.read(next((root / "results" / name).iterdir()))


def test_256_streams_their_delivery_and_the_served_step(benchmark, tmp_path):
    """256 streams in flight (a closed loop of steptrace's client): the server's latency
    per token (a step's end to its chunk written), and the served engine thread's step p50
    against `steptrace run`'s of the same trace and load, on the Python loop the server
    runs and on the C++ loop a modeled run takes by default."""
    enabled = not benchmark.disabled
    requests, output = (4 * STREAMS, 32) if enabled else (STREAMS // 8, 4)
    body = trace(requests, 1000, 64, output) + \
        f"load: {{mode: concurrency, concurrency: {STREAMS}}}\n"
    (tmp_path / "server").mkdir()
    result: dict = {}

    def drive():
        with serve_process(tmp_path / "server") as (url, runs):
            ours = client_run(tmp_path, f'{{endpoint: "{url}", model: deepseek-v3}}', body)
            result["delivery_s"] = delivery_mean_s(url)
        result["served"], result["client"] = runs[0], ours

    benchmark.pedantic(drive, rounds=1, iterations=1)
    served, ours = result["served"], result["client"]
    assert (ours.table("requests")["status"] == "finished").all()
    local = local_run(tmp_path, body + "replay_loop: python\n", "python")
    native = local_run(tmp_path, body, "cpp")
    step_ratio = served.value("step.p50") / local.value("step.p50")
    # the same engine stepped in this process, no server, each step's modeled time waited
    # out as the server waits it (tests/bench/paced_step_cost.py)
    from tests.bench.paced_step_cost import engine_workload, p50s
    paced_step = p50s(engine_workload(tmp_path, "released"), "paced", 0, False)[3]
    benchmark.extra_info.update(delivery_us_per_token=result["delivery_s"] * 1e6,
                                served_step_p50_us=served.value("step.p50"),
                                run_step_p50_us=local.value("step.p50"),
                                run_cpp_loop_step_p50_us=native.value("step.p50"),
                                served_steps=served.value("step.count"),
                                run_steps=local.value("step.count"),
                                served_sched_call_p50_us=served.value("sched_call.p50"),
                                run_sched_call_p50_us=local.value("sched_call.p50"),
                                served_tpot_p50_ms=served.value("tpot.p50") * 1e3,
                                step_ratio=step_ratio, paced_step_p50_us=paced_step,
                                served_to_paced=served.value("step.p50") / paced_step)
    # against a run that never waits the served step is slower, the wait's cost, not the
    # server's (docs/serving.md, "Speed"): the figures are reported, not asserted
    print(f"\nserve at {STREAMS} streams: {benchmark.extra_info}")


def test_send_lag_at_1000_requests_a_second(benchmark, tmp_path):
    """steptrace's client sending 1,000 req/s (open loop) to `steptrace serve`: its send lag
    behind each request's intended time (the manifest's `target.send_lag_s`)."""
    requests = 3000 if not benchmark.disabled else 100
    (tmp_path / "server").mkdir()
    result: dict = {}

    def drive():
        with serve_process(tmp_path / "server") as (url, _):
            result["client"] = client_run(tmp_path, f'{{endpoint: "{url}", model: deepseek-v3}}',
                                          trace(requests, 1000, 16, 2))

    benchmark.pedantic(drive, rounds=1, iterations=1)
    ours = result["client"]
    lag = ours.manifest.target["send_lag_s"]
    assert lag["count"] == requests and (ours.table("requests")["status"] == "finished").all()
    benchmark.extra_info.update({f"send_lag_{k}_ms": v * 1e3 for k, v in lag.items()
                                 if k != "count"})
    print(f"\nclient at 1000 req/s: {benchmark.extra_info}")


# The embedded default's engine (workloads/quickstart.yaml): the tiny model's real forward
CPU_ENGINE = """engine: {max_num_batched_tokens: 2048, max_num_seqs: 64, num_kv_blocks: 4096, \
block_size: 16}
model: tiny
device: cpu
calibration_requests: 0
telemetry: {enabled: false}
"""
CPU_STREAMS = 16


def test_served_cpu_engine_step_against_the_run(benchmark, tmp_path):
    """The real (CPU) engine served at 16 streams (a closed loop of steptrace's client) and
    replayed by `steptrace run` at the same load, alternately, PAIRS times: the ratio of
    their engine step p50s (served / run, the forward included) with its interval over the
    pairs, beside the run's A/A noise floor."""
    enabled = not benchmark.disabled
    pairs, requests, output = (4, 8 * CPU_STREAMS, 32) if enabled else (1, CPU_STREAMS, 4)
    body = trace(requests, 1000, 64, output) + \
        f"load: {{mode: concurrency, concurrency: {CPU_STREAMS}}}\n"
    served, local = [], []

    def drive():
        for i in range(pairs):
            (tmp_path / f"server{i}").mkdir()
            with serve_process(tmp_path / f"server{i}", CPU_ENGINE) as (url, runs):
                ours = client_run(tmp_path, f'{{endpoint: "{url}", model: tiny}}', body,
                                  f"client{i}")
            assert (ours.table("requests")["status"] == "finished").all()
            served.append(runs[0])
            local.append(local_run(tmp_path, body, f"run{i}", CPU_ENGINE))

    benchmark.pedantic(drive, rounds=1, iterations=1)
    served_p50 = [r.value("step.p50") for r in served]
    run_p50 = [r.value("step.p50") for r in local]
    assert [r.value("step.count") for r in served] and all(p > 0 for p in served_p50 + run_p50)
    step = ratio(run_p50, served_p50)
    floor = noise_floor(run_p50)
    benchmark.extra_info.update(
        served_step_p50_us=served_p50, run_step_p50_us=run_p50,
        served_steps=[r.value("step.count") for r in served],
        run_steps=[r.value("step.count") for r in local],
        step_ratio=step.ratio, step_ratio_low=step.low, step_ratio_high=step.high,
        run_noise_floor=floor.spread if floor else None)
    print(f"\nserved CPU engine at {CPU_STREAMS} streams: {benchmark.extra_info}")
