"""Point-to-point transfers in flight, waited for off the engine's thread.

gloo's send and receive works never report completion to `is_completed()` until `wait()`
has been called, and `wait()` blocks (the GIL released): so each peer's works are waited
for, in their order (the order the peer completes them), by a thread of that peer's, and
the engine's thread collects what completed between its steps.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Dict, List


class P2PWaits:
    def __init__(self) -> None:
        self._peers: Dict[int, queue.SimpleQueue] = {}
        self._threads: List[threading.Thread] = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self.in_flight = 0

    def add(self, peer: int, work, payload: Any) -> None:
        """Wait for `work` (a transfer with `peer`); `payload` comes back from completed()."""
        if peer not in self._peers:
            self._peers[peer] = q = queue.SimpleQueue[Any]()
            thread = threading.Thread(target=self._wait, args=(q,), daemon=True,
                                      name=f"p2p-peer{peer}")
            thread.start()
            self._threads.append(thread)
        self.in_flight += 1
        self._peers[peer].put((work, payload))

    def completed(self, timeout: float = 0.0) -> List[Any]:
        """The payloads of the transfers completed since the last call (waiting up to
        `timeout` for one); a failed transfer's error raised here."""
        out = []
        try:
            item = self._done.get(timeout=timeout) if timeout > 0 else self._done.get_nowait()
            while True:
                self.in_flight -= 1
                if isinstance(item, BaseException):
                    raise item
                out.append(item)
                item = self._done.get_nowait()
        except queue.Empty:
            return out

    def close(self) -> None:
        for q in self._peers.values():
            q.put(None)

    def _wait(self, q: queue.SimpleQueue) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            work, payload = item
            try:
                work.wait()
            except BaseException as e:  # noqa: BLE001  (the engine's thread raises it)
                self._done.put(e)
                return
            self._done.put(payload)
