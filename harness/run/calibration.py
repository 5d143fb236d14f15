"""Null-engine calibration: what the harness itself costs per step and per request.

The run's scheduler configuration serves the first requests of its trace, all queued at
once (with no time passing, arrivals would only ever meet an idle engine), around the null
executor: nothing computed, every step done at once, recorded as a run is. What that takes
is the harness's own overhead, the floor under every measured step (MLPerf LoadGen reports
the same with its null SUT).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from typing import Optional, Tuple

import numpy as np

from engine import LLMEngine

from ..record.recorder import Recorder
from ..replay.driver import Requests, replay

REAL_CLOCK_REQUESTS = 500  # calibration_requests: null on the real clock
VIRTUAL_CLOCK = ("off on the virtual clock: the harness's time between steps is not on its "
                 "timeline (calibration_requests: null; a number calibrates)")


def planned(workload, trace_rows: int) -> Tuple[int, Optional[str]]:
    """The calibration's size for a workload and its trace's rows; where that is 0, why the
    calibration is off."""
    given = workload.calibration_requests
    if given is None and workload.clock == "virtual":
        return 0, VIRTUAL_CLOCK
    if given == 0:
        return 0, "off: calibration_requests: 0"
    return min(REAL_CLOCK_REQUESTS if given is None else given, trace_rows), None


def calibrate(config, trace, requests: int) -> dict:
    """Serve the trace's first `requests` rows with the null engine: per-request cost
    (add_request + enqueue record) and per-step cost (schedule, postprocess, record, loop)."""
    config = dataclasses.replace(config, executor="null")
    n = min(requests, len(trace))
    if n < 1:
        raise ValueError("calibration needs at least one request")
    prompt, output = trace["prompt_len"].to_numpy()[:n], trace["max_new_tokens"].to_numpy()[:n]
    with tempfile.TemporaryDirectory(prefix="steptrace-calibration-") as tmp:
        engine, recorder = _null_run(config, tmp)
        start = time.perf_counter()
        for i in range(n):
            recorder.enqueue(engine.add_request(i, prompt_len=int(prompt[i]),
                                                max_new_tokens=int(output[i])), 0.0)
        per_request = (time.perf_counter() - start) / n
        recorder.close()
        engine.close()

        engine, recorder = _null_run(config, tmp)
        start = time.perf_counter()
        replay(engine, Requests(np.zeros(n), prompt, output), "virtual", recorder)
        replay_s = time.perf_counter() - start
        recorder.close()
        steps = recorder.step_summary.steps
        engine.close()
    per_step = max(0.0, replay_s - n * per_request) / max(steps, 1)
    return dict(requests=n, steps=steps, replay_s=replay_s, per_request_us=per_request * 1e6,
                per_step_us=per_step * 1e6)


def _null_run(config, tmp: str):
    engine = LLMEngine(config)
    recorder = Recorder(engine, 0, tmp)
    recorder.tables_ready()  # a table writer starting up would take the CPU being timed
    return engine, recorder
