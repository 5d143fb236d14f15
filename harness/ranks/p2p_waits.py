"""Point-to-point transfers in flight, waited for off the engine's thread.

gloo's send and receive works never report completion to `is_completed()` until `wait()`
has been called, and `wait()` blocks (the GIL released): so each peer's works are waited
for, in their order (the order the peer completes them), by a thread of that peer's, and
the engine's thread collects what completed between its steps. NCCL's and HCCL's `wait()`
does not block the host (it makes the current stream wait), but their `is_completed()`
tells when the device has done the transfer: those works are polled instead.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Dict, List, Optional, Tuple


class P2PWaits:
    def __init__(self, polled: bool = False) -> None:
        """`polled`: the works report completion themselves (NCCL, HCCL)."""
        self._polled: Optional[List[Tuple[Any, Any]]] = [] if polled else None
        self._peers: Dict[int, queue.SimpleQueue] = {}
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self.in_flight = 0

    def add(self, peer: int, work, payload: Any) -> None:
        """Wait for `work` (a transfer with `peer`); `payload` comes back from completed()."""
        if self._polled is not None:
            self._polled.append((work, payload))
            self.in_flight += 1
            return
        if peer not in self._peers:
            self._peers[peer] = q = queue.SimpleQueue[Any]()
            threading.Thread(target=self._wait, args=(q,), daemon=True,
                             name=f"p2p-peer{peer}").start()
        self.in_flight += 1
        self._peers[peer].put((work, payload))

    def completed(self) -> List[Any]:
        """The payloads of the transfers completed since the last call; a failed
        transfer's error raised here."""
        if self._polled is not None:
            done = [payload for work, payload in self._polled if work.is_completed()]
            self._polled = [(w, p) for w, p in self._polled if not w.is_completed()]
            self.in_flight -= len(done)
            return done
        out: List[Any] = []
        while True:
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return out
            self.in_flight -= 1
            if isinstance(item, BaseException):
                raise item
            out.append(item)

    def _wait(self, q: queue.SimpleQueue) -> None:
        while True:  # a daemon thread: it ends with its process
            work, payload = q.get()
            try:
                work.wait()
            except BaseException as e:  # noqa: BLE001  (the engine's thread raises it)
                self._done.put(e)
                return
            self._done.put(payload)
