"""Point-to-point works waited for off the engine's thread (harness/ranks/p2p_waits.py):
each peer's in its order, one peer's slow transfer never holding another's back, a failed
one's error raised on the engine's thread."""

import threading
import time

import pytest

from harness.ranks.p2p_waits import P2PWaits


class Work:
    """A send or receive that completes when `finish` is set (or fails)."""

    def __init__(self, error=None):
        self.finish, self.error = threading.Event(), error

    def wait(self):
        self.finish.wait()
        if self.error is not None:
            raise self.error
        return True


def collect(waits, n, timeout=5.0):
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n:
        out += waits.completed()
        assert time.monotonic() < deadline, out
        time.sleep(0.001)
    return out


def test_each_peer_in_its_order_and_a_slow_peer_holds_no_other_back():
    waits = P2PWaits()
    slow, a1, a2 = Work(), Work(), Work()
    waits.add(1, slow, "from 1")
    waits.add(2, a1, "first from 2")
    waits.add(2, a2, "second from 2")
    assert waits.in_flight == 3 and waits.completed() == []
    a2.finish.set()
    a1.finish.set()
    assert collect(waits, 2) == ["first from 2", "second from 2"]
    slow.finish.set()
    assert collect(waits, 1) == ["from 1"] and waits.in_flight == 0


def test_a_failed_transfer_is_raised_on_the_engines_thread():
    waits = P2PWaits()
    work = Work(RuntimeError("peer 3 closed the connection"))
    waits.add(3, work, "never")
    work.finish.set()
    with pytest.raises(RuntimeError, match="peer 3 closed"):
        collect(waits, 1)


def test_nccl_and_hccl_works_are_polled():
    class Polled:
        def __init__(self):
            self.done = False

        def is_completed(self):
            return self.done

    waits = P2PWaits(polled=True)
    first, second = Polled(), Polled()
    waits.add(1, first, "a")
    waits.add(1, second, "b")
    assert waits.completed() == [] and waits.in_flight == 2
    second.done = True
    assert waits.completed() == ["b"] and waits.in_flight == 1
