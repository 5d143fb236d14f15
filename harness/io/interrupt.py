"""Ctrl-C and SIGTERM during a run: a flag (Stop) the replay checks between steps, not an
exception.

The first signal of a sweep stops all of it: the run in progress writes its tables whole,
marked incomplete, and no later run starts. The command then exits 128 + the signal's
number, the shell's convention (130 for SIGINT, 143 for SIGTERM), so that
`steptrace run W.yaml && publish` publishes nothing interrupted.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop(threading.Event):
    """Set by the first SIGINT or SIGTERM (or a KeyboardInterrupt, counted as SIGINT);
    `signum` is that signal's number, None while nothing stopped the sweep."""

    signum: Optional[int] = None

    def request(self, signum: int = signal.SIGINT) -> None:
        if self.signum is None:
            self.signum = int(signum)
        self.set()

    @property
    def signal_name(self) -> Optional[str]:
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 0 if self.signum is None else 128 + self.signum


def install(stop: Stop) -> dict:
    """SIGINT and SIGTERM only set `stop` from now on; returns the previous handlers, for
    restore(). Only the main thread can take signals: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, lambda signum, _: stop.request(signum))
            for signum in SIGNALS}


def restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextmanager
def signals_stop(stop: Stop) -> Iterator[Stop]:
    """install() for the block, restore() after it."""
    previous = install(stop)
    try:
        yield stop
    finally:
        restore(previous)
