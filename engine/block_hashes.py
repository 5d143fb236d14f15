"""A trace's hash ids as the hashes of the engine's blocks: the mirror of
csrc/block_hashes.cpp, whose header states the rule. And a prompt's own hash ids, one per
block of its token ids, where it comes as ids and not from a trace."""

from __future__ import annotations

import hashlib
from typing import List, Optional, Sequence

import numpy as np

_M = (1 << 64) - 1


def _mix(h: int, x: int) -> int:
    z = h ^ ((x + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2)) & _M)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M
    return z ^ (z >> 31)


def block_size_mismatch(hash_block: int, block_size: int) -> Optional[str]:
    if hash_block % block_size == 0 or block_size % hash_block == 0:
        return None
    return (f"hash block size {hash_block} and block_size {block_size}: "
            f"one must divide the other")


def block_hashes(ids: Sequence[int], hash_block: int, block_size: int,
                 prompt_len: int) -> List[int]:
    full = prompt_len // block_size
    out: List[int] = []
    chain = 0
    if hash_block >= block_size:
        k = hash_block // block_size
        for i, block_id in enumerate(ids):
            if i * k >= full:
                break
            chain = _mix(chain, block_id & _M)
            out.extend(_mix(chain, sub) for sub in range(min(k, full - i * k)))
    else:
        m = block_size // hash_block
        for i, block_id in enumerate(ids):
            if i // m >= full:
                break
            chain = _mix(chain, block_id & _M)
            if (i + 1) % m == 0:
                out.append(_mix(chain, 0))
    return out


def content_hash_ids(tokens: Sequence[int], block_size: int) -> List[int]:
    """One id per block of `block_size` tokens (the last one partial), each the hash of
    that block's ids: equal blocks get equal ids, and the chaining (block_hashes) makes a
    block's hash depend on every token before it, as vLLM's prefix cache keys blocks."""
    data = np.asarray(tokens, np.int64)
    return [int.from_bytes(hashlib.blake2b(data[i:i + block_size].tobytes(),
                                           digest_size=8).digest(), "little") >> 1
            for i in range(0, len(data), block_size)]
