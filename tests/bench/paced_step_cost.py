"""Why the served engine's `schedule()` call is slower than `steptrace run`'s at the same
load (docs/serving.md, "Speed"): the engine of tests/bench/test_serve_bench.py stepped
through 256 requests in this process, no server, with wall time between its steps as
`steptrace serve` has it (the modeled forward time it is paced to) or not (`steptrace
run`'s virtual clock), with and without a second Python thread writing JSON chunks (as the
HTTP thread streams them), the GIL released in `schedule()` (the default) or held:

    python -m tests.bench.paced_step_cost

Each line: the wait between steps, the other thread, and the p50 of `sched_call` (the call
as Python sees it) and `sched_cpp` (inside C++) over every step of ROUNDS replays.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from engine import LLMEngine, _core
from harness.workload import load_workload
from tests.bench.test_serve_bench import ENGINE, STREAMS

ROUNDS = 3
GAPS_MS = (0, 2, 5, 10, 30)


def engine_workload(root: Path, gil: str):
    path = root / f"paced-{gil}.yaml"
    path.write_text(ENGINE + "trace:\n  generate: {requests: 1, rate: 1}\n"
                    f"gil: {gil}\noutput: {root}\nname: paced\n")
    return load_workload(str(path), ())


def writer(stop: threading.Event) -> None:
    """Python work with a system call (the GIL let go) about every chunk, as a stream's."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    chunk = {"choices": [{"index": 0, "text": " tok"}]}
    while not stop.is_set():
        try:
            os.write(w, json.dumps(chunk).encode())
            os.read(r, 1 << 16)
        except BlockingIOError:
            pass


def p50s(workload, wait: str, gap_ms: float, busy: bool):
    """(sched_call p50, sched_cpp p50, steps, step p50) in us; `wait`: `spin` (a C++ spin
    of gap_ms, the GIL let go, the core kept), `paced` (ServeLoop's wait: the step's
    modeled time) or none."""
    stop, calls, cpp, steps = threading.Event(), [], [], []
    other = threading.Thread(target=writer, args=(stop,), daemon=True) if busy else None
    if other is not None:
        other.start()
    try:
        for _ in range(ROUNDS):
            engine = LLMEngine(workload.engine_config(workload.arms[0]))
            for i in range(STREAMS):
                engine.add_request(i, prompt_token_ids=None, max_new_tokens=32, prompt_len=64,
                                   arrival_time=0.0)
            while engine.has_unfinished():
                start = time.perf_counter()
                record = engine.step()
                if record is None:
                    continue
                if wait == "paced":
                    stop.wait(max(0.0, start + record.forward_ns / 1e9 - time.perf_counter()))
                elif wait == "spin" and gap_ms:
                    _core._spin(int(gap_ms * 1e6), True)
                calls.append(record.sched_call_ns / 1e3)
                cpp.append(record.sched_cpp_ns / 1e3)
                steps.append(record.step_ns / 1e3)
            engine.close()
    finally:
        stop.set()
        if other is not None:
            other.join()
    return float(np.median(calls)), float(np.median(cpp)), len(calls), float(np.median(steps))


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        workloads = {gil: engine_workload(Path(root), gil) for gil in ("released", "held")}
        cases = [("spin", gap, False, "released") for gap in GAPS_MS] + \
            [("paced", 0, False, "released"), ("spin", 0, True, "released"),
             ("paced", 0, True, "released"), ("paced", 0, True, "held")]
        for wait, gap, busy, gil in cases:
            call, inside, steps, _ = p50s(workloads[gil], wait, gap, busy)
            between = "modeled forward (paced)" if wait == "paced" else f"{gap} ms spin"
            print(f"gil {gil:8} between steps {between:24} writer {'yes' if busy else 'no ':3}  "
                  f"sched_call p50 {call:6.1f} us  sched_cpp p50 {inside:5.1f} us  "
                  f"({steps} steps)", flush=True)


if __name__ == "__main__":
    main()
