"""The processes of this host that run a sweep's points: a `spawn` pool (each worker a
fresh interpreter: the engine's C++ state is per process), one point a task.

A signal that stops the sweep stops its points too: no queued point starts (the pool has
already handed some to its workers, where cancelling cannot reach them), and each running
point's run is stopped as `run` stops one (SIGTERM: its tables written whole, marked
interrupted), so the point is not complete and runs again on resume.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any, Dict, Iterator, Optional

from .point import Point
from .task import empty_answer, run_point

_stopping: Optional[Any] = None  # in a worker: the sweep's stop event


def _start_worker(event) -> None:
    global _stopping
    _stopping = event


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
                               initargs=(event,))
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
