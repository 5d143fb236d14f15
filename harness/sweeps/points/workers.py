"""How many of a sweep's points run at once on this host (`--workers`): no more than the
points to run, than the cores this process may use (a modeled point is one CPU-bound
thread: a second worker on a core only waits for it, holding its memory), nor than the
memory available now holds at WORKER_BYTES a worker (10,000 would start one interpreter
per point)."""

from __future__ import annotations

import os
import sys

import psutil

# A point's worker, an interpreter of its own, and its run's table writer: measured at
# 147 MiB and 123 MiB resident (psutil, RSS at their peak) in a sweep of modeled points of
# 400 requests on Linux, Python 3.11; rounded up for a longer trace's tables.
WORKER_BYTES = 300 * 2**20


def cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS: no affinity
        return os.cpu_count() or 1


def workers(asked: int, points: int, on_this_host: bool = True) -> int:
    """`asked` (>= 1: the command refuses less), at most `points` (at least 1) and, for
    this host's pool, one a core and as many as the available memory holds, saying on
    stderr where the host's bound lowered it."""
    if not on_this_host:  # a Ray cluster's resources bound it
        return max(1, min(asked, points))
    available = psutil.virtual_memory().available
    by_cores, by_memory = cores(), max(1, available // WORKER_BYTES)
    most = min(by_cores, by_memory)
    if asked > most and points > most:
        bound = f"one a core of the {by_cores} this host gives the sweep" \
            if by_cores <= by_memory else \
            f"what the {available / 2**30:.1f} GiB of memory available holds at " \
            f"{WORKER_BYTES // 2**20} MiB a worker"
        print(f"steptrace: --workers {asked}: {most} at once, {bound}", file=sys.stderr)
    return max(1, min(asked, points, most))
