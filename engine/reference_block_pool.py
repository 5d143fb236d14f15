"""A DP rank's pool of paged KV blocks, in Python: the mirror of csrc/block_pool.cpp.

Blocks carry reference counts so that sequences with a common prompt prefix share the
blocks that hold it (prefix caching). A full prompt block is indexed by its hash once its
KV is committed. When its last owner lets it go it stays indexed, retained: free for
allocation, yet still found by a lookup, until an allocation evicts it, least recently used
first.
"""

from __future__ import annotations

from typing import Dict, List, Optional


class ReferenceBlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.num_total = num_blocks
        self._free: List[int] = list(range(num_blocks - 1, -1, -1))  # pop() -> lowest id first
        self._refs = [0] * num_blocks
        self._retained: Dict[int, None] = {}  # insertion order: oldest (next evicted) first
        self._by_hash: Dict[int, int] = {}
        self._hash_of: Dict[int, int] = {}
        self.num_evicted = 0

    @property
    def num_free(self) -> int:
        return len(self._free) + len(self._retained)

    @property
    def num_retained(self) -> int:
        return len(self._retained)

    def allocate(self, n: int, owner: List[int]) -> None:
        """Unindexed blocks first (last freed first), then retained ones, least recently
        used first, each leaving the index."""
        for _ in range(n):
            if self._free:
                block = self._free.pop()
            else:
                block = next(iter(self._retained))
                del self._retained[block]
                del self._by_hash[self._hash_of.pop(block)]
                self.num_evicted += 1
            self._refs[block] = 1
            owner.append(block)

    def share(self, block: int, owner: List[int]) -> None:
        self._retained.pop(block, None)
        self._refs[block] += 1
        owner.append(block)

    def release(self, owner: List[int]) -> None:
        """An indexed block that reaches zero is retained, its owner's later blocks ahead of
        its earlier ones in eviction order."""
        for block in owner:
            self._refs[block] -= 1
            if self._refs[block] == 0 and block not in self._hash_of:
                self._free.append(block)
        for block in reversed(owner):
            if self._refs[block] == 0 and block in self._hash_of:
                self._retained[block] = None
        owner.clear()

    def lookup(self, block_hash: int) -> Optional[int]:
        return self._by_hash.get(block_hash)

    def index(self, block: int, block_hash: int) -> None:
        """Make a committed full block findable by its hash (first writer wins)."""
        if block_hash not in self._by_hash and block not in self._hash_of:
            self._by_hash[block_hash] = block
            self._hash_of[block] = block_hash

    def refcount(self, block: int) -> int:
        return self._refs[block]
