"""The routers in front of a P/D deployment's pools, named as SGLang's router names its
policies (docs/disaggregation.md, "Routers"). A router sees what a router process sees:
what it sent where and what came back, never an instance's scheduler.

- round_robin: instance after instance.
- least_tokens (prefill): the fewest outstanding tokens, prompt tokens routed and not yet
  prefilled (vLLM's DP load balancer counts the same; ties to the lower instance).
- cache_aware (prefill): SGLang's cache-aware policy with its defaults: when the loads
  (unfinished requests) are imbalanced (the most above the fewest by more than 64 and 1.5
  times over) the least loaded instance; else the one whose routed prompts share the
  longest run of the request's leading blocks, when that run covers more than 30 % of the
  prompt (ties: the less loaded, then the lower instance); else the one whose record is
  smallest (the most cache to spare; ties: the less loaded, the lower instance). Each
  instance's record of routed blocks is an approximate prefix tree (SGLang's too), here a
  set of chained block hashes, least recently routed evicted beyond the instance's KV
  blocks.
- least_kv (decode): the most KV blocks to spare over the instance's DP ranks: the free
  blocks the instances last reported, less the prompt blocks of the sequences routed there
  and not yet admitted (admission reserves them; a burst of hand-offs routed before the
  next report would otherwise all go to one instance); ties to the lower instance.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, List, Optional, Sequence

from engine.block_hashes import block_hashes

BALANCE_ABS, BALANCE_REL, CACHE_THRESHOLD = 64, 1.5, 0.3


class PrefillRouter:
    def __init__(self, policy: str, instances: int, capacity_blocks: int,
                 block_size: int) -> None:
        self.policy, self.n = policy, instances
        self.block_size, self.capacity = block_size, capacity_blocks
        self.load = [0] * instances  # unfinished requests routed there
        self.tokens = [0] * instances  # prompt tokens routed, not yet prefilled
        self._blocks: List[OrderedDict] = [OrderedDict() for _ in range(instances)]
        self._next = 0

    def route(self, prompt_len: int, hashes: Sequence[int]) -> int:
        """The instance a request goes to; its load counted there."""
        if self.policy == "round_robin":
            i, self._next = self._next, (self._next + 1) % self.n
        elif self.policy == "least_tokens":
            i = min(range(self.n), key=lambda k: (self.tokens[k], k))
        else:
            i = self._cache_aware(prompt_len, hashes)
        if self.policy == "cache_aware":
            self._remember(i, hashes)
        self.load[i] += 1
        self.tokens[i] += prompt_len
        return i

    def hashes(self, hash_ids, hash_block_size: Optional[int], prompt_len: int) -> Sequence[int]:
        """A request's chained block hashes, as cache_aware routes by them (no other
        policy reads them: none)."""
        if hash_ids is None or self.policy != "cache_aware":
            return ()
        return block_hashes(hash_ids, hash_block_size or self.block_size, self.block_size,
                            prompt_len)

    def prefilled(self, instance: int, prompt_len: int) -> None:
        """A request routed to `instance` left it (handed off or rejected)."""
        self.load[instance] -= 1
        self.tokens[instance] -= prompt_len

    def _cache_aware(self, prompt_len: int, hashes: Sequence[int]) -> int:
        load = self.load
        fewest = min(range(self.n), key=lambda k: (load[k], k))
        if max(load) - load[fewest] > BALANCE_ABS and max(load) > BALANCE_REL * load[fewest]:
            return fewest
        hits = [self._hit(k, hashes) for k in range(self.n)]
        best = min(range(self.n), key=lambda k: (-hits[k], load[k], k))
        if hits[best] * self.block_size > CACHE_THRESHOLD * prompt_len:
            return best
        return min(range(self.n), key=lambda k: (len(self._blocks[k]), load[k], k))

    def _hit(self, instance: int, hashes: Sequence[int]) -> int:
        blocks = self._blocks[instance]
        for n, h in enumerate(hashes):
            if h not in blocks:
                return n
        return len(hashes)

    def _remember(self, instance: int, hashes: Sequence[int]) -> None:
        blocks = self._blocks[instance]
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


def awaited_blocks(prompt_lens: Iterable[int], block_size: int) -> int:
    """The KV blocks the prompts of sequences routed to a decode and not yet admitted
    will take there."""
    return sum(-(-int(p) // block_size) for p in prompt_lens)


class DecodeRouter:
    def __init__(self, policy: str, instances: int) -> None:
        self.policy, self.n = policy, instances
        self._next = 0

    def route(self, free_blocks: Sequence[int]) -> int:
        """The instance a prefilled sequence goes to; `free_blocks` per instance, less
        those awaited there."""
        if self.policy == "round_robin":
            i, self._next = self._next, (self._next + 1) % self.n
            return i
        return min(range(self.n), key=lambda k: (-free_blocks[k], k))
