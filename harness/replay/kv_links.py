"""KV transfers in flight over the devices' links, as a fluid: each device's link splits its
bandwidth equally among the transfers on it, and a transfer moves at the smaller of its two
ends' shares (the sender's and the receiver's), recomputed whenever a transfer starts or
ends (docs/disaggregation.md, "The KV transfer")."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Hashable, Optional, Tuple


@dataclass
class _Transfer:
    sender: Hashable
    receiver: Hashable
    remaining: float  # bytes
    sender_bps: float
    receiver_bps: float
    rate: float = 0.0


class Links:
    def __init__(self) -> None:
        self._active: Dict[int, _Transfer] = {}
        self._now = 0.0

    def __len__(self) -> int:
        return len(self._active)

    def start(self, key: int, sender: Hashable, receiver: Hashable, nbytes: float,
              sender_bps: float, receiver_bps: float, now: float) -> None:
        """A transfer of `nbytes` from the `sender` device's link to the `receiver`'s, each
        of the given bandwidth (bytes/s), starting `now`."""
        self.advance(now)
        self._active[key] = _Transfer(sender, receiver, float(nbytes), sender_bps, receiver_bps)
        self._share()

    def next_end(self) -> Tuple[float, Optional[int]]:
        """(time, key) of the transfer that ends first at today's shares; (inf, None) with
        none in flight."""
        best, key = math.inf, None
        for k, t in self._active.items():
            end = self._now + t.remaining / t.rate
            if end < best:
                best, key = end, k
        return best, key

    def finish(self, key: int, now: float) -> None:
        """The transfer `key` moved its last byte at `now` (its next_end)."""
        self.advance(now)
        del self._active[key]
        self._share()

    def advance(self, now: float) -> None:
        elapsed = now - self._now
        if elapsed > 0:
            for t in self._active.values():
                t.remaining = max(0.0, t.remaining - t.rate * elapsed)
        self._now = max(self._now, now)

    def _share(self) -> None:
        senders = Counter(t.sender for t in self._active.values())
        receivers = Counter(t.receiver for t in self._active.values())
        for t in self._active.values():
            t.rate = min(t.sender_bps / senders[t.sender], t.receiver_bps / receivers[t.receiver])
