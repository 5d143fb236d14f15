"""The device sampler's process, the host source and the device summary."""

import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from harness.record.metrics import SUMMARY_COLUMNS
from harness.telemetry import DEVICE_COLUMNS, Sampler, device_summary
from harness.telemetry.columns import row
from harness.telemetry.host import HostSource
from tests.helpers import process_gone, wait_for_samples

ROOT = Path(__file__).resolve().parents[1]


def _nvml_driver_present():
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no library, no driver
        return False
    pynvml.nvmlShutdown()
    return True


# --- the sampler process ---------------------------------------------------------------

def test_a_cpu_run_has_a_device_table_on_the_run_clock():
    t0 = time.perf_counter()
    sampler = Sampler("cpu", [], 0.05, t0, os.getpid())
    began = time.perf_counter()
    sampler.start()
    assert time.perf_counter() - began < 1.0  # launched, not waited for
    time.sleep(1.0)
    frame, notes = sampler.stop()
    stopped = time.perf_counter() - t0  # the sampler samples until stop() has it stop
    assert list(frame.columns) == list(DEVICE_COLUMNS)
    assert len(frame) >= 5
    assert (frame["source"] == "cpu").all() and (frame["device"] == -1).all()
    t = frame["t_s"].to_numpy()
    assert 0 < t[0] and t[-1] <= stopped and np.all(np.diff(t) > 0)
    assert 0.04 <= np.median(np.diff(t)) <= 0.2  # the interval, give or take a busy host
    assert (frame["process_rss_bytes"] > 0).all() and (frame["host_mem_used_bytes"] > 0).all()
    cpu = frame["host_cpu_pct"]  # none in a sample within 20 ms of the last: the first, and
    assert cpu.iloc[1:-1].notna().all() and cpu.dropna().between(0, 100).all()  # the stop's
    assert frame["util_pct"].isna().all() and frame["power_w"].isna().all()
    assert frame.dtypes["device"] == np.int64 and frame.dtypes["util_pct"] == np.float64
    assert notes == {"cpu": f"psutil {psutil.__version__}: process {os.getpid()} and host, "
                            "every 0.05 s"}


def test_the_child_imports_neither_pandas_nor_torch():
    code = ("import sys, harness.telemetry.child; "
            "print(sorted({'pandas', 'torch', 'engine'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(_nvml_driver_present(), reason="an NVIDIA driver is present")
def test_a_cuda_run_without_nvidia_driver_goes_on_with_the_host():
    sampler = Sampler("cuda", [0], 0.05, time.perf_counter(), os.getpid())
    sampler.start()
    wait_for_samples(sampler, 2)
    frame, notes = sampler.stop()
    assert notes["nvml"].startswith("unavailable: ")
    assert len(frame) >= 2 and (frame["source"] == "cpu").all()


def test_a_crashed_child_keeps_its_rows_and_the_notes_say_so():
    sampler = Sampler("cpu", [], 0.05, time.perf_counter(), os.getpid())
    sampler.start()
    wait_for_samples(sampler, 3)
    os.kill(sampler._process.pid, signal.SIGKILL)
    frame, notes = sampler.stop()
    assert len(frame) >= 3
    assert notes["sampler"] == "child exited with -9: no message; rows up to then kept"


def test_a_sampler_that_cannot_start_returns_an_empty_table(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    sampler = Sampler("cpu", [], 0.05, time.perf_counter(), os.getpid())
    sampler.start()
    frame, notes = sampler.stop()
    assert frame.empty and list(frame.columns) == list(DEVICE_COLUMNS)
    assert notes["sampler"].startswith("not started: [Errno 2]")


def test_the_child_exits_by_itself_when_the_parent_dies():
    # The parent forks a worker first, as DataLoaders and DP ranks do: the worker holds
    # the child's stdin open, so only the parent pid tells the child its parent is gone.
    parent = textwrap.dedent("""
        import os, time
        from harness.telemetry import Sampler
        sampler = Sampler("cpu", [], 0.05, time.perf_counter(), os.getpid())
        sampler.start()
        worker = os.fork()
        if worker == 0:  # lets go of the test's stdout pipe, holds on to the child's stdin
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            time.sleep(10)
            os._exit(0)
        print(sampler._process.pid, worker, sampler._dir, flush=True)
        time.sleep(0.3)
        os._exit(0)  # no stop(): the parent dies
    """)
    out = subprocess.run([sys.executable, "-c", parent], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    pid, worker, journal_dir = out.stdout.split()
    try:
        assert process_gone(int(pid), within_s=10.0)  # a loaded host is slow
        assert not Path(journal_dir).exists()  # nobody would read the journal: removed
    finally:
        os.kill(int(worker), signal.SIGKILL)
        shutil.rmtree(journal_dir, ignore_errors=True)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="backend must be one of"):
        Sampler("rocm", [0], 0.1, 0.0, os.getpid())
    with pytest.raises(ValueError, match="interval_s must be positive"):
        Sampler("cpu", [], 0.0, 0.0, os.getpid())


# --- the host source -------------------------------------------------------------------

def test_host_source_reads_the_process_and_the_machine():
    source = HostSource(os.getpid(), 0.1, lambda: 2.0)
    source.sample()  # starts psutil's intervals
    end = time.process_time() + 0.05
    while time.process_time() < end:  # some CPU time for the process to show
        pass
    r = source.sample()[0]
    assert (r["t_s"], r["source"], r["device"]) == (2.0, "cpu", -1)
    assert r["process_cpu_pct"] > 0
    assert r["process_rss_bytes"] == pytest.approx(psutil.Process().memory_info().rss, rel=0.2)
    assert 0 < r["host_mem_used_bytes"] < psutil.virtual_memory().total
    assert 0 <= r["host_cpu_pct"] <= 100


def test_a_process_that_goes_away_leaves_the_host_rows():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        source = HostSource(child.pid, 0.1, lambda: 3.0)
        assert source.sample()[0]["process_rss_bytes"] > 0
    finally:
        child.kill()
        child.wait()
    r = source.sample()[0]
    assert r["process_cpu_pct"] is None and r["process_rss_bytes"] is None
    assert r["host_mem_used_bytes"] > 0
    assert source.notes["cpu.process"] == (f"gone at t=3.000 s: process no longer exists "
                                           f"(pid={child.pid})")
    assert HostSource(child.pid, 0.1, lambda: 0.0).notes["cpu.process"].startswith("unavailable")


# --- the summary -----------------------------------------------------------------------

GIB = 1 << 30


def make_frame():
    """Two GPUs and the host, sampled each second from 0 to 10 s; the window is [2, 8].
    Warm-up (t < 2) and tail (t > 8) samples carry values that must not count."""
    rows = []
    for t in range(11):
        inside = 2 <= t <= 8
        for device in (0, 1):
            rows.append(row(float(t), "nvml", device,
                            util_pct=10.0 * t if inside else 100.0,
                            mem_used_bytes=(t if inside else 1) * GIB,
                            mem_total_bytes=80 * GIB,
                            power_w=300.0 + device * 100 if inside else 700.0,
                            energy_j=50.0 * t * (device + 1)))
        rows.append(row(float(t), "cpu", -1, process_cpu_pct=120.0 if inside else 5.0,
                        host_cpu_pct=40.0, process_rss_bytes=(3 if inside else 9) * GIB,
                        host_mem_used_bytes=16 * GIB))
    return pd.DataFrame(rows, columns=list(DEVICE_COLUMNS)).astype({"device": "int64"})


def lookup(summary, metric, stat):
    hit = summary[(summary["metric"] == metric) & (summary["stat"] == stat)]
    assert len(hit) == 1, (metric, stat)
    return hit.iloc[0]


def test_summary_covers_the_window_only():
    summary = device_summary(make_frame(), 2.0, 8.0, output_tokens=600)
    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    util = lookup(summary, "gpu0_util", "mean")
    assert util["value"] == pytest.approx(50.0) and util["unit"] == "%"
    assert lookup(summary, "gpu0_util", "count")[["value", "unit"]].tolist() == [7.0, "samples"]
    assert lookup(summary, "gpu1_util", "max")["value"] == 80.0
    assert lookup(summary, "gpu0_util", "p50")["value"] == 50.0
    assert lookup(summary, "gpu0_mem_used", "peak")[["value", "unit"]].tolist() == [8 * GIB,
                                                                                    "bytes"]
    assert lookup(summary, "gpu0_mem_total", "value")["value"] == 80 * GIB
    assert lookup(summary, "gpu0_power", "mean")[["value", "unit"]].tolist() == [300.0, "W"]
    assert lookup(summary, "gpu1_power", "mean")["value"] == 400.0
    # the counters read 100 J and 400 J at 2 s, 400 J and 800 J at 8 s
    assert lookup(summary, "gpu0_energy", "total")[["value", "unit"]].tolist() == [300.0, "J"]
    assert lookup(summary, "gpu1_energy", "total")["value"] == 600.0
    assert lookup(summary, "energy", "total")["value"] == 900.0
    per_token = lookup(summary, "energy_per_output_token", "value")
    assert per_token[["value", "unit"]].tolist() == [1.5, "J/token"]
    assert lookup(summary, "process_cpu", "mean")["value"] == 120.0
    assert lookup(summary, "host_cpu", "p99")["value"] == 40.0
    assert lookup(summary, "process_rss", "peak")["value"] == 3 * GIB
    assert lookup(summary, "host_mem_used", "peak")["value"] == 16 * GIB
    # never reported by any source: no rows
    assert not summary["metric"].str.contains("sm_activity|aicore|host_power").any()


def test_energy_between_samples_uses_the_reading_before_the_window():
    summary = device_summary(make_frame(), 2.5, 7.5, output_tokens=100)
    # readings at 2 s and 7 s bracket the window on gpu0: 350 - 100
    assert lookup(summary, "gpu0_energy", "total")["value"] == 250.0


def test_energy_is_unknown_when_a_reading_in_the_window_is_missing():
    frame = make_frame()
    lost = (frame["source"] == "nvml") & (frame["device"] == 1) & (frame["t_s"] >= 5)
    frame.loc[lost, ["util_pct", "energy_j", "power_w", "mem_used_bytes"]] = np.nan
    summary = device_summary(frame, 2.0, 8.0, output_tokens=600)
    assert math.isnan(lookup(summary, "gpu1_energy", "total")["value"])
    assert math.isnan(lookup(summary, "energy", "total")["value"])
    assert math.isnan(lookup(summary, "energy_per_output_token", "value")["value"])
    assert lookup(summary, "gpu0_energy", "total")["value"] == 300.0
    assert lookup(summary, "gpu1_util", "count")["value"] == 3.0


def test_without_energy_or_tokens_there_is_no_invented_figure():
    npu = pd.DataFrame([row(float(t), "npu-smi", 0, util_pct=50.0, aicore_pct=40.0,
                            mem_used_bytes=GIB) for t in range(5)], columns=list(DEVICE_COLUMNS))
    summary = device_summary(npu, 0.0, 4.0, output_tokens=10)
    assert lookup(summary, "npu0_aicore", "mean")["value"] == 40.0
    assert not summary["metric"].str.contains("energy|power").any()
    zero_tokens = device_summary(make_frame(), 2.0, 8.0, output_tokens=0)
    assert math.isnan(lookup(zero_tokens, "energy_per_output_token", "value")["value"])
    empty = device_summary(make_frame(), 20.0, 30.0, output_tokens=10)
    assert lookup(empty, "gpu0_util", "count")["value"] == 0
    assert math.isnan(lookup(empty, "gpu0_util", "mean")["value"])


def test_a_first_sample_leaves_the_cpu_out_rather_than_reading_zero():
    """psutil counts the host's interval per calling thread: a source opened in one thread
    and sampled in another (the sampler's) has no interval at its first sample."""
    source = HostSource(os.getpid(), 0.1, lambda: 0.0)
    time.sleep(0.05)
    with ThreadPoolExecutor(1) as sampling:
        first = sampling.submit(source.sample).result()[0]
        assert first["process_cpu_pct"] is None and first["host_cpu_pct"] is None
        assert first["process_rss_bytes"] > 0 and first["host_mem_used_bytes"] > 0
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass
        second = sampling.submit(source.sample).result()[0]
    assert second["process_cpu_pct"] > 0 and second["host_cpu_pct"] > 0


def test_a_run_shorter_than_one_period_has_its_cpu_measured(tmp_path):
    """The sampler samples once more as it stops: a 0.3 s run under a 10 s period still has
    a CPU reading over its last interval."""
    sampler = Sampler("cpu", [], 10.0, time.perf_counter(), os.getpid())
    sampler.start()
    wait_for_samples(sampler, 1)  # the first, as the source opened: no CPU reading
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    frame, _ = sampler.stop()
    assert len(frame) == 2 and np.isnan(frame["process_cpu_pct"].iloc[0])
    assert frame["process_cpu_pct"].iloc[1] > 0
