"""The emulated executor: a step's forward is the host's real work plus the modeled
device's roofline, waited for with the GIL released."""

import sys
import threading
import time

import numpy as np
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig

pytestmark = pytest.mark.core

LAUNCH_US = 200.0
LAYERS = 61  # deepseek-v3's decoder layers
ATTEMPTS = 5  # runs of test_device_wait_lets_other_threads_run before it fails


def emulated_engine(**sched):
    cfg = EngineConfig(scheduler=SchedulerConfig(**{**dict(num_kv_blocks=4096, block_size=64),
                                                    **sched}),
                       model="deepseek-v3", executor="emulated:H200", precision="fp8",
                       launch_us=LAUNCH_US)
    return LLMEngine(cfg)


def roofline_ns(engine, record) -> float:
    """What the modeled executor gives the same step: each rank's roofline time and the
    step overhead (the overhead alone for a rank that moves no byte), the slowest rank's."""
    device = engine.executor.roofline
    r, overhead = device.roofline, device.overhead_s

    def rank_s(f) -> float:
        return overhead + (max(f.executed_flops / r.flops_per_s, f.bytes / r.bytes_per_s,
                               r.floor_s) if f.bytes else 0.0)
    return max(rank_s(f) for f in record.flops) * 1e9


def test_step_is_the_roofline_plus_the_host_time():
    engine = emulated_engine()
    for i in range(8):
        engine.add_request(i, prompt_len=50 + 10 * i, max_new_tokens=6)
    records = engine.run()
    assert len(records) >= 6 and not any(r.modeled for r in records)
    launch = LAYERS * LAUNCH_US * 1e3
    device = np.array([roofline_ns(engine, r) for r in records])
    host = np.array([r.forward_ns for r in records]) - device
    assert host.min() >= launch  # the launch cost is spent, the roofline waited out
    # Packing and the sleep's wake-up take well under a millisecond on an idle host and
    # several on a loaded one; half a roofline more would be a second wait.
    assert np.median(host) - launch < 0.5 * np.median(device), (host, device)


def test_device_wait_lets_other_threads_run():
    """Another thread takes the GIL inside the device wait. With a switch interval longer
    than the test, the engine's thread gives the GIL up only where it releases it, so a
    tick inside a wait proves the wait released it, however loaded the host; load can only
    keep the other thread off the CPU for a whole run, which the next attempt repeats (a
    wait that holds the GIL gets no tick in any attempt)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        for _ in range(ATTEMPTS):
            if ticks_in_device_waits():
                return
    finally:
        sys.setswitchinterval(previous)
    pytest.fail(f"no other thread ran inside a device wait in {ATTEMPTS} runs: the wait "
                f"holds the GIL")


def ticks_in_device_waits() -> int:
    """The other thread's ticks inside a step's device wait, over one run: the last
    roofline's worth of its forward (the sleep lasts the roofline at least, and ends the
    forward)."""
    engine = emulated_engine()
    engine.add_request(0, prompt_len=4000, max_new_tokens=3)  # a 0.27 s prefill wait
    ticks, stop = [], threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter_ns())
            # gives the GIL back (the switch interval will not) and stays off it for a
            # while: a thread that takes it straight back can starve the engine's
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        records = engine.run()
    finally:
        stop.set()
        thread.join()
    at = np.array(ticks)
    inside = 0
    for r in records:
        wait_end = r.start_ns + r.sched_call_ns + r.forward_ns  # the forward follows schedule()
        inside += int(((at > wait_end - roofline_ns(engine, r)) & (at < wait_end)).sum())
    return inside
