"""How many of a sweep's points run at once on this host (`--workers`): each is an
interpreter of its own (torch and the engine: about 300 MB), so no more than the points to
run, nor than WORKERS_PER_CORE a core this process may use; more only wait for a core while
holding their memory (10,000 would start one interpreter per point)."""

from __future__ import annotations

import os
import sys

WORKERS_PER_CORE = 2


def cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS: no affinity
        return os.cpu_count() or 1


def workers(asked: int, points: int, on_this_host: bool = True) -> int:
    """`asked` (>= 1: the command refuses less), at most `points` (at least 1) and, for
    this host's pool, WORKERS_PER_CORE a core, saying on stderr where the host's bound
    lowered it."""
    most = WORKERS_PER_CORE * cores()
    if on_this_host and asked > most and points > most:
        print(f"steptrace: --workers {asked}: {most} at once, at most {WORKERS_PER_CORE} a "
              f"core of the {cores()} this host gives the sweep", file=sys.stderr)
    return max(1, min(asked, points, most if on_this_host else asked))
