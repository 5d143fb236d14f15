"""The sampler's own process: `harness.telemetry.child '<json config>'`, run as a module
by harness/io/child_process.py (isolated: nothing from the working directory).

Each source samples in its own thread, so that a slow npu-smi call never delays the CPU
samples. Rows and notes go to a JSON-lines journal as they come, one flushed line each:
whatever was written survives if the parent has to kill this process. The process stops
on a line or EOF on stdin (the parent's stop, or the parent gone) and when its parent
pid changes (the parent died while a forked sibling still holds the pipe open). When the
parent is gone nobody will read the journal: the child removes its folder (`dir`, the
sampler's temporary folder) before it exits, so a harness killed outright (SIGKILL) leaves
nothing behind. Imports stay light: no pandas, no torch, no engine.
"""

import json
import os
import shutil
import sys
import threading
import time
from typing import Dict, List, Protocol

from harness.telemetry.host import HostSource
from harness.telemetry.npu_smi import NpuSmiSource
from harness.telemetry.nvml import NvmlSource

PARENT_CHECK_S = 0.25


class Source(Protocol):
    """What a sampling thread asks of its source (host, NVML, npu-smi)."""

    name: str
    period_s: float
    notes: Dict[str, str]

    def sample(self) -> list: ...

    def close(self) -> None: ...


class Journal:
    def __init__(self, file):
        self._file = file
        self._lock = threading.Lock()
        self._notes = {}

    def write(self, rows, notes):
        with self._lock:
            for r in rows:
                self._file.write(json.dumps({"row": r}) + "\n")
            for key, text in notes.items():
                if self._notes.get(key) != text:
                    self._notes[key] = text
                    self._file.write(json.dumps({"note": [key, text]}) + "\n")
            self._file.flush()


def open_sources(config, clock):
    period = config["interval_s"]
    sources: List[Source] = [HostSource(config["pid"], period, clock)]
    if config["backend"] == "cuda":
        sources.append(NvmlSource(config["devices"], period, clock))
    elif config["backend"] == "npu":
        sources.append(NpuSmiSource(config["devices"], period, clock))
    return sources


def run_source(source, journal, stop, clock):
    """Samples every period, and once more when told to stop: the last interval, however
    short, is measured (a run shorter than one period has its CPU that way)."""
    due = time.perf_counter()
    while True:
        last = stop.is_set()
        try:
            rows = source.sample()
        except Exception as e:  # noqa: BLE001 -- a bug in one source must not end the others
            source.notes[source.name] = (f"stopped at t={clock():.3f} s: "
                                         f"{type(e).__name__}: {e}")
            journal.write([], source.notes)
            return
        journal.write(rows, source.notes)
        if last:
            return
        due = max(due + source.period_s, time.perf_counter())
        stop.wait(due - time.perf_counter())


def watch_stdin(stop, parent_gone):
    if not sys.stdin.readline():  # EOF without the stop line: the parent is gone
        parent_gone.set()
    stop.set()


def main(argv):
    config = json.loads(argv[1])
    t0 = config["t0"]

    def clock():  # perf_counter is CLOCK_MONOTONIC on Linux: shared with the parent
        return time.perf_counter() - t0

    parent = config.get("parent", os.getppid())
    stop, parent_gone = threading.Event(), threading.Event()
    threading.Thread(target=watch_stdin, args=(stop, parent_gone), daemon=True).start()
    try:
        sample(config, clock, stop, parent, parent_gone)
    finally:
        if parent_gone.is_set() and config.get("dir"):
            shutil.rmtree(config["dir"], ignore_errors=True)


def sample(config, clock, stop, parent, parent_gone):
    with open(config["out"], "a", encoding="utf-8") as out:
        journal = Journal(out)
        sources = open_sources(config, clock)
        threads = [threading.Thread(target=run_source, args=(s, journal, stop, clock),
                                    daemon=True) for s in sources]
        for thread in threads:
            thread.start()
        while not stop.wait(PARENT_CHECK_S):
            if os.getppid() != parent:
                parent_gone.set()
                stop.set()
        for thread in threads:
            thread.join()
        for source in sources:
            source.close()
            journal.write([], source.notes)


if __name__ == "__main__":
    main(sys.argv)
