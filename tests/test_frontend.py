"""The frontend thread of a real-clock replay: requests enqueued at their times beside the
engine's loop, tokens delivered after their commit, and what the GIL does to both."""

import numpy as np

from engine import EngineConfig, LLMEngine, SchedulerConfig, _core
from harness.frontend import Frontend
from harness.replay import replay

SPIN_NS = 5_000_000  # a 5 ms C++ call before every schedule()
N = 60


class SpinningScheduler:
    """The engine's scheduler behind a 5 ms C++ call that holds or releases the GIL as the
    schedule() call it precedes does."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def schedule(self, release_gil=True, phase=None):
        _core._spin(SPIN_NS, release_gil)
        return self._inner.schedule(release_gil=release_gil, phase=phase)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Tokens:
    """A recorder that keeps only what the test checks: each step's end time."""

    def __init__(self) -> None:
        self.ends = []

    def enqueue(self, added, t) -> None:
        pass

    def step(self, record, t_start, t_end) -> None:
        self.ends.append(t_end)


def replay_with_frontend(release_gil: bool, spin: bool, per_token_us: float = 0.0,
                         max_new_tokens: int = 100):
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=1024),
                                    executor="null", release_gil=release_gil))
    if spin:
        engine.scheduler = SpinningScheduler(engine.scheduler)
    arrivals = np.arange(N) * 0.007  # 7 ms apart: out of step with the 5 ms calls
    frontend = Frontend(arrivals, per_token_us)
    recorder = Tokens()
    try:
        assert replay(engine, arrivals, np.full(N, 8), np.full(N, max_new_tokens), "real",
                      recorder, frontend=frontend)
    finally:
        frontend.close()
    return frontend.columns(np.arange(N)), recorder


def test_enqueue_drift_shows_a_held_gil():
    # A shared host only adds delay, so each arm's least p99 of three interleaved replays
    # is the nearest to what the GIL alone does.
    p99 = {True: [], False: []}
    for release_gil in (False, True, True, False, False, True):
        columns, _ = replay_with_frontend(release_gil=release_gil, spin=True)
        p99[release_gil].append(np.percentile(columns["enqueue_drift_s"], 99))
    assert min(p99[False]) - min(p99[True]) >= 0.002, p99


def test_every_token_is_delivered_after_its_commit():
    columns, recorder = replay_with_frontend(release_gil=True, spin=False, per_token_us=50.0,
                                             max_new_tokens=5)
    drift = columns["enqueue_drift_s"]
    assert np.all(drift >= 0) and np.all(np.isfinite(drift))
    p50, worst = columns["delivery_delay_p50_s"], columns["delivery_delay_max_s"]
    assert np.all(np.isfinite(p50)) and np.all(worst >= p50) and np.all(p50 >= 50e-6)
