"""The processes of this host that run a sweep's points: a `spawn` pool (each worker a
fresh interpreter: the engine's C++ state is per process), one point a task.

A signal that stops the sweep stops its points too: no queued point starts (the pool has
already handed some to its workers, where cancelling cannot reach them), and each running
point's run is stopped as `run` stops one (SIGTERM: its tables written whole, marked
interrupted), so the point is not complete and runs again on resume. The sweep waits for
those runs to be written, then for nothing: a second SIGINT or SIGTERM meanwhile kills the
workers at once (their points stay incomplete) and changes nothing else.

Ctrl-C at a terminal signals the whole process group, the workers too. A worker ignores
SIGINT but inside a point's run (where `run`'s handler only stops the run): a
KeyboardInterrupt raised in a worker while it reads its queue would cut a message in two,
and the pool's protocol (a worker reading half of another's message, or the end-of-work
marker, and waiting for ever) with it. So once the sweep is stopping, the pool's queues are
not relied on: a worker whose point was stopped exits by itself, one between points dies of
the SIGTERM, and the sweep waits for their processes, not for their answers. This module
imports nothing heavy, so that a worker ignores SIGINT a moment after it starts, not after
seconds of imports.

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
from typing import TYPE_CHECKING, Any, Dict, Iterator, NoReturn, Optional, Sequence

from ...io.interrupt import SIGNALS

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from .point import Point

_stopping: Optional[Any] = None  # in a worker: the sweep's stop event
PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCH_S = 0.2  # without prctl: how often a worker looks for its parent


def _start_worker(event, parent: int) -> None:
    global _stopping
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep stops its workers
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
    """run_point, unless the sweep was stopped: a worker of a stopped sweep ends instead,
    before the point starts or once its run is stopped and written (nobody reads the
    answer)."""
    from .task import run_point

    if not _stopped():
        answer = run_point(point)
        if not _stopped():
            return answer
    _leave()


def _stopped() -> bool:
    return _stopping is not None and _stopping.is_set()


def _leave() -> NoReturn:
    """This worker ended at once, as a stopped sweep's: its idle table writer ended first
    (the sweep lets its folder go once its workers are gone), its output flushed."""
    from ...record.table_writer import end_idle

    end_idle()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signal.SIGTERM)


@contextmanager
def host_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of `workers` processes for the block; on an exception (a signal) its queued
    points are not started and its workers ended (_stop) before the pool is shut down."""
    context = get_context("spawn")
    event = context.Event()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(event, os.getpid()))
    try:
        yield pool
    except BaseException:
        # no public way to reach the workers before Python 3.14's terminate_workers()
        processes = list(pool._processes.values())
        with _second_signal_kills(processes):
            _stop(processes, event)
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _stop(processes: Sequence[BaseProcess], event) -> None:
    """Every worker ended: no queued point starts, each running one is stopped as `run`
    stops one (SIGTERM) and writes its run, and the worker exits (run_unless_stopped); a
    worker between points dies of the SIGTERM."""
    event.set()
    for process in processes:
        process.terminate()
    for process in processes:
        process.join()


@contextmanager
def _second_signal_kills(processes: Sequence[BaseProcess]) -> Iterator[None]:
    """For the block, SIGINT and SIGTERM kill `processes` (SIGKILL) and do nothing else:
    the sweep is already stopping, its exit status the first signal's. Only the main
    thread takes signals: elsewhere nothing changes."""
    def kill(signum, frame) -> None:
        for process in processes:
            process.kill()
    main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, kill) for signum in SIGNALS} if main else {}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
