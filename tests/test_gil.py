"""The released entry really releases the GIL; the held entry really holds it.

A ticker thread stamps perf_counter_ns (CLOCK_MONOTONIC, the clock of sched_start_ns) while
holding the GIL. With the GIL held for the whole C++ call no stamp can fall inside it;
with it released the ticker keeps running beside the call.
"""

import contextlib
import threading
import time

import pytest

from tests.helpers import make_scheduler

pytestmark = pytest.mark.core

N = 100_000


def long_plan_calls(release_gil, calls=3):
    schedulers = []
    for _ in range(calls):
        s = make_scheduler(max_num_batched_tokens=N, max_num_seqs=N, num_kv_blocks=N)
        for i in range(N):
            s.add_sequence(seq_id=i, prompt_len=1, max_new_tokens=1)
        schedulers.append(s)

    with ticking() as stamps:
        plans = [s.schedule(release_gil=release_gil) for s in schedulers]  # prompt rounds
    windows = [(p.sched_start_ns, p.sched_start_ns + p.sched_ns) for p in plans]
    return [sum(start < t < end for t in stamps) for start, end in windows], windows


@contextlib.contextmanager
def ticking():
    """A thread stamping perf_counter_ns() as often as it gets the GIL, while the body runs."""
    stamps, stop = [], threading.Event()

    def ticker():
        while not stop.is_set():
            stamps.append(time.perf_counter_ns())

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        yield stamps
    finally:
        stop.set()
        thread.join()


def test_released_schedule_lets_another_thread_run():
    inside, windows = long_plan_calls(release_gil=True)
    assert min(end - start for start, end in windows) > 1_000_000  # long enough to tell: > 1 ms
    assert max(inside) > 0, f"no ticks inside released calls {windows}"


def test_held_schedule_blocks_other_threads():
    inside, _ = long_plan_calls(release_gil=False)
    assert inside == [0, 0, 0]


def test_reference_accepts_the_same_keyword():
    s = make_scheduler("reference")
    s.add_sequence(seq_id=0, prompt_len=2, max_new_tokens=1)
    assert s.schedule(release_gil=False).phase == "prompt"


def test_released_postprocess_lets_another_thread_run():
    schedulers = []
    for _ in range(3):
        s = make_scheduler(max_num_batched_tokens=N, max_num_seqs=N, num_kv_blocks=N)
        for i in range(N):
            s.add_sequence(seq_id=i, prompt_len=1, max_new_tokens=2)
        schedulers.append((s, s.schedule()))  # a prompt round: N first tokens to commit
    windows = []
    with ticking() as stamps:
        for s, plan in schedulers:
            start = time.perf_counter_ns()
            s.postprocess(plan, release_gil=True)
            windows.append((start, time.perf_counter_ns()))
    assert max(sum(start < t < end for t in stamps) for start, end in windows) > 0
