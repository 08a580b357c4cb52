"""Prefix caching from prompt block hashes (Mooncake-style ``hash_ids``).

A trace's ``hash_ids`` name the KV blocks of each prompt, ``SimConfig.hash_block_tokens`` tokens each (512 in
Mooncake's traces): equal hashes at equal positions mean equal prefixes. Every prefilling instance (prefill instances
when disaggregated, colocated instances otherwise) keeps an LRU cache of ``prefix_cache_tokens`` tokens of such
blocks. A request whose first ``k`` block hashes are all cached skips their prefill: it computes only its other
prompt tokens (at least one), the cached ones counting as attended context. Its blocks enter the cache when its
prefill ends. The cache is a separate pool: it does not take KV capacity from running requests.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """LRU set of block hashes with a capacity in blocks."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 1:
            raise ValueError("a prefix cache holds at least one block")
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def matched(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks of ``hashes`` in the cache (without touching them)."""
        count = 0
        for h in hashes:
            if h not in self._blocks:
                break
            count += 1
        return count

    def use(self, hashes: Sequence[int]) -> int:
        """Leading blocks of ``hashes`` in the cache, marked most recently used."""
        count = self.matched(hashes)
        for h in hashes[:count]:
            self._blocks.move_to_end(h)
        return count

    def insert(self, hashes: Sequence[int]) -> None:
        """Add (or refresh) blocks, evicting the least recently used beyond the capacity."""
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)


def cached_tokens(blocks: int, block_tokens: int, prompt_tokens: int) -> int:
    """Prompt tokens a hit of ``blocks`` leading blocks saves (one prompt token is always computed)."""
    return min(blocks * block_tokens, prompt_tokens - 1)
