"""The processes of this host that run a sweep's points: a `spawn` pool (each worker a
fresh interpreter: the engine's C++ state is per process), one point a task.

A signal that stops the sweep stops its points too: no queued point starts (the pool has
already handed some to its workers, where cancelling cannot reach them), and each running
point's run is stopped as `run` stops one (SIGTERM: its tables written whole, marked
interrupted), so the point is not complete and runs again on resume.

A sweep's process that dies without a word (SIGKILL, the OOM killer) takes its workers
with it: each is killed the moment its parent ends (PR_SET_PDEATHSIG on Linux; elsewhere
a thread that watches the parent), so none finishes its point behind a resume's back, and
none waits for minutes on a queue no one feeds. The killed point is not complete.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any, Dict, Iterator, Optional

from .point import Point
from .task import empty_answer, run_point

_stopping: Optional[Any] = None  # in a worker: the sweep's stop event
PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCH_S = 0.2  # without prctl: how often a worker looks for its parent


def _start_worker(event, parent: int) -> None:
    global _stopping
    _stopping = event
    _die_with(parent)


def _die_with(parent: int) -> None:
    """This process killed when `parent`, the sweep's, ends."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    else:
        threading.Thread(target=_watch, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # it ended before this worker was told to follow it
        os.kill(os.getpid(), signal.SIGKILL)


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os.kill(os.getpid(), signal.SIGKILL)


def run_unless_stopped(point: Point) -> Dict:
    """run_point, unless the sweep was stopped before the point started."""
    if _stopping is not None and _stopping.is_set():
        return dict(empty_answer(), status="failed", reason="not run: the sweep was stopped")
    return run_point(point)


@contextmanager
def host_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of `workers` processes for the block; on an exception (a signal) its queued
    points are not started and its running ones stopped before the pool is shut down."""
    context = get_context("spawn")
    event = context.Event()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(event, os.getpid()))
    try:
        yield pool
    except BaseException:
        event.set()
        # no public way to reach the workers before Python 3.14's terminate_workers()
        for process in list(pool._processes.values()):
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
