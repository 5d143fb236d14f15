"""A DP rank's pool of paged KV blocks, in Python: the mirror of csrc/block_pool.cpp.

Blocks carry reference counts so that sequences with a common prompt prefix share the
blocks that hold it (prefix caching). A full prompt block is indexed by its hash once its
KV is committed. When its last owner lets it go it stays indexed, retained: free for
allocation, yet still found by a lookup, until an allocation evicts it, least recently used
first. A retained block released on behalf of a session still to come back (session
retention) is held: evicted only once no other retained block is left. With a host tier, an
evicted block's hash goes to the host tier, a least recently used set of at most
host_blocks hashes, whose blocks a later prefix hit reloads instead of computing them again.
"""

from __future__ import annotations

from typing import Dict, List, Optional


class ReferenceBlockPool:
    def __init__(self, num_blocks: int, host_blocks: int = 0) -> None:
        self.num_total = num_blocks
        self._free: List[int] = list(range(num_blocks - 1, -1, -1))  # pop() -> lowest id first
        self._refs = [0] * num_blocks
        # insertion order: oldest (next evicted) first; held blocks after every plain one
        self._retained: Dict[int, None] = {}
        self._held: Dict[int, int] = {}  # block: its session
        self._by_hash: Dict[int, int] = {}
        self._hash_of: Dict[int, int] = {}
        self.num_evicted = 0
        self.host_capacity = host_blocks
        self._host: Dict[int, None] = {}  # insertion order: oldest (next dropped) first

    @property
    def num_free(self) -> int:
        return len(self._free) + self.num_retained

    @property
    def num_retained(self) -> int:
        return len(self._retained) + len(self._held)

    @property
    def num_held(self) -> int:
        return len(self._held)

    def allocate(self, n: int, owner: List[int]) -> None:
        """Unindexed blocks first (last freed first), then retained ones, least recently
        used first, held ones last, each leaving the index."""
        for _ in range(n):
            if self._free:
                block = self._free.pop()
            else:
                block = next(iter(self._retained or self._held))
                self._retained.pop(block, None)
                self._held.pop(block, None)
                block_hash = self._hash_of.pop(block)
                del self._by_hash[block_hash]
                self._offload(block_hash)
                self.num_evicted += 1
            self._refs[block] = 1
            owner.append(block)

    def share(self, block: int, owner: List[int]) -> None:
        self._retained.pop(block, None)
        self._held.pop(block, None)
        self._refs[block] += 1
        owner.append(block)

    def release(self, owner: List[int], session: int = -1) -> None:
        """An indexed block that reaches zero is retained, its owner's later blocks ahead of
        its earlier ones in eviction order; held for `session` when that is >= 0."""
        for block in owner:
            self._refs[block] -= 1
            if self._refs[block] == 0 and block not in self._hash_of:
                self._free.append(block)
        for block in reversed(owner):
            if self._refs[block] == 0 and block in self._hash_of:
                if session >= 0:
                    self._held[block] = session
                else:
                    self._retained[block] = None
        owner.clear()

    def unhold(self, session: int) -> None:
        """The blocks held for `session` become plain retained ones, the newest, in held
        order."""
        for block in [b for b, s in self._held.items() if s == session]:
            del self._held[block]
            self._retained[block] = None

    def lookup(self, block_hash: int) -> Optional[int]:
        return self._by_hash.get(block_hash)

    @property
    def num_host(self) -> int:
        return len(self._host)

    def on_host(self, block_hash: int) -> bool:
        return block_hash in self._host

    def reload(self, block_hash: int) -> None:
        """The host tier's block is read: it becomes the most recently used."""
        if block_hash in self._host:
            del self._host[block_hash]
            self._host[block_hash] = None

    def _offload(self, block_hash: int) -> None:
        if not self.host_capacity:
            return
        if block_hash in self._host:
            self.reload(block_hash)
            return
        if len(self._host) == self.host_capacity:
            del self._host[next(iter(self._host))]
        self._host[block_hash] = None

    def index(self, block: int, block_hash: int) -> None:
        """Make a committed full block findable by its hash (first writer wins)."""
        if block_hash not in self._by_hash and block not in self._hash_of:
            self._by_hash[block_hash] = block
            self._hash_of[block] = block_hash

    def refcount(self, block: int) -> int:
        return self._refs[block]
