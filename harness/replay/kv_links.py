"""KV transfers in flight over the devices' links, as a fluid: each device's link splits its
bandwidth equally among the transfers on it, and a transfer moves at the smaller of its two
ends' shares (the sender's and the receiver's), recomputed whenever a transfer starts or
ends on one of its devices (docs/disaggregation.md, "The KV transfer").

A start or an end touches only the transfers that share a device with it: each transfer
keeps its bytes left as of its last change of rate, and a heap holds every transfer's
projected end (stale entries skipped), so many transfers on different devices cost no
more than one each. The reference of csrc/replay/kv_links.hpp, the C++ P/D loop's twin.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Dict, Hashable, List, Optional, Set, Tuple


@dataclass
class _Transfer:
    sender: Hashable
    receiver: Hashable
    remaining: float  # bytes, as of `since`
    sender_bps: float
    receiver_bps: float
    since: float = 0.0
    rate: float = 0.0
    version: int = 0  # of its projected end in the heap


class Links:
    def __init__(self) -> None:
        self._active: Dict[int, _Transfer] = {}
        self._on: Dict[Hashable, Set[int]] = {}  # device -> the transfers on its link
        self._ends: List[Tuple[float, int, int]] = []  # (projected end, version, key)

    def __len__(self) -> int:
        return len(self._active)

    def start(self, key: int, sender: Hashable, receiver: Hashable, nbytes: float,
              sender_bps: float, receiver_bps: float, now: float) -> float:
        """A transfer of `nbytes` from the `sender` device's link to the `receiver`'s, each
        of the given bandwidth (bytes/s), starting `now`; returns its rate (bytes/s)."""
        self._active[key] = _Transfer(sender, receiver, float(nbytes), sender_bps,
                                      receiver_bps, since=now)
        for device in (sender, receiver):
            self._on.setdefault(device, set()).add(key)
        self._share(sender, receiver, now)
        return self._active[key].rate

    def next_end(self) -> Tuple[float, Optional[int]]:
        """(time, key) of the transfer that ends first at today's shares; (inf, None) with
        none in flight."""
        ends = self._ends
        while ends and (ends[0][2] not in self._active
                        or self._active[ends[0][2]].version != ends[0][1]):
            heapq.heappop(ends)
        return (ends[0][0], ends[0][2]) if ends else (math.inf, None)

    def finish(self, key: int, now: float) -> None:
        """The transfer `key` moved its last byte at `now` (its next_end)."""
        t = self._active.pop(key)
        for device in (t.sender, t.receiver):
            self._on[device].discard(key)
        self._share(t.sender, t.receiver, now)

    def _share(self, sender: Hashable, receiver: Hashable, now: float) -> None:
        """New shares for the transfers on these two devices' links, from `now`."""
        for key in self._on[sender] | self._on[receiver]:
            t = self._active[key]
            t.remaining = max(0.0, t.remaining - t.rate * (now - t.since))
            t.since = now
            t.rate = min(t.sender_bps / len(self._on[t.sender]),
                         t.receiver_bps / len(self._on[t.receiver]))
            t.version += 1
            heapq.heappush(self._ends, (now + t.remaining / t.rate, t.version, key))
