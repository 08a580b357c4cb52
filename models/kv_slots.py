"""A KV cache of row slots for continuous batching: rows join and leave without copying the whole cache.

Keys and values of every layer live in preallocated ``[slots, heads, columns, dim]`` buffers; the live
batch is slots ``[:rows]`` and columns ``[:length]``, right-aligned (left padding is masked). A decode
step writes one column in place (no per-step concatenation); a finished row is replaced by moving the
last live row into its slot; prefilled rows are copied into free slots. Buffers start zeroed, so masked
columns never hold NaN (0 * NaN would leak through attention).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

# Buffers grow by a quarter of their columns (at least MIN_COLUMNS) when a row outgrows them: doubling would
# leave up to half of a cache of gigabytes unused at a 1,024-token cap.
GROWTH = 4
MIN_COLUMNS = 64


class SlotLayer(DynamicLayer):
    """One layer's keys/values; Hugging Face attention sees views of the live block."""

    def __init__(self, slots: int = 1) -> None:
        super().__init__()
        self.slots = slots
        self.rows = self.length = 0
        self.buf_k: torch.Tensor | None = None
        self.buf_v: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self.reserve(self.rows, end, key_states)
        self.buf_k[:self.rows, :, self.length:end] = key_states
        self.buf_v[:self.rows, :, self.length:end] = value_states
        self.length = end
        self.expose()
        return self.keys, self.values

    def reserve(self, rows: int, columns: int, like: torch.Tensor) -> None:
        """Grow the buffers (zeroed, by a quarter of their columns or more) to hold ``rows`` x ``columns``,
        keeping live data."""
        have = (0, 0) if self.buf_k is None else (self.buf_k.shape[0], self.buf_k.shape[2])
        if rows <= have[0] and columns <= have[1]:
            return
        grown = have[1] + max(have[1] // GROWTH, MIN_COLUMNS)
        shape = (max(rows, have[0], self.slots), like.shape[1], max(columns, grown), like.shape[3])
        new_k, new_v = like.new_zeros(shape), like.new_zeros(shape)
        if self.buf_k is not None:
            new_k[:self.rows, :, :self.length] = self.buf_k[:self.rows, :, :self.length]
            new_v[:self.rows, :, :self.length] = self.buf_v[:self.rows, :, :self.length]
        self.buf_k, self.buf_v = new_k, new_v

    def expose(self) -> None:
        self.keys = self.buf_k[:self.rows, :, :self.length]
        self.values = self.buf_v[:self.rows, :, :self.length]
        self.is_initialized = True
        self.device, self.dtype = self.buf_k.device, self.buf_k.dtype

    def add_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Put prefilled rows (``[g, heads, P, dim]``) into the next free slots, right-aligned."""
        width = keys.shape[2]
        if width > self.length:
            self.shift(width - self.length)
        self.reserve(self.rows + keys.shape[0], self.length, keys)
        rows = slice(self.rows, self.rows + keys.shape[0])
        self.buf_k[rows, :, self.length - width:self.length] = keys
        self.buf_v[rows, :, self.length - width:self.length] = values
        self.rows += keys.shape[0]
        self.expose()

    def shift(self, columns: int) -> None:
        """Move the live block ``columns`` to the right (negative: drop that many leading columns)."""
        new_length = max(0, self.length + columns)
        if self.buf_k is None:
            self.length = new_length
            return
        keep = min(self.length, new_length)
        live_k = self.buf_k[:self.rows, :, self.length - keep:self.length].clone()
        live_v = self.buf_v[:self.rows, :, self.length - keep:self.length].clone()
        self.reserve(self.rows, new_length, live_k)
        self.length = new_length
        self.buf_k[:self.rows, :, new_length - keep:new_length] = live_k
        self.buf_v[:self.rows, :, new_length - keep:new_length] = live_v
        self.expose()

    def move_rows(self, sources: torch.Tensor, targets: torch.Tensor, rows: int) -> None:
        """Copy slots ``sources`` into ``targets`` and keep ``rows`` live slots."""
        if len(sources):
            self.buf_k[targets] = self.buf_k[sources]
            self.buf_v[targets] = self.buf_v[sources]
        self.rows = rows
        self.expose()


class SlotCache(Cache):
    """A :class:`SlotLayer` per decoder layer, with batch-level join/leave/trim operations."""

    def __init__(self, num_layers: int, slots: int) -> None:
        super().__init__(layers=[SlotLayer(slots) for _ in range(num_layers)])

    @property
    def length(self) -> int:
        return self.layers[0].length

    def add_rows(self, prefilled: DynamicCache) -> None:
        """Append the rows of a freshly prefilled cache."""
        for layer, new in zip(self.layers, prefilled.layers):
            layer.add_rows(new.keys, new.values)

    def keep(self, keep: list[int]) -> list[int]:
        """Keep live rows ``keep`` (ascending); returns, per new slot, the old slot it holds now."""
        rows = len(keep)
        kept = set(keep)
        holes = [i for i in range(rows) if i not in kept]
        movers = [j for j in keep if j >= rows]
        order = list(range(rows))
        for hole, mover in zip(holes, movers):
            order[hole] = mover
        device = self.layers[0].buf_k.device
        sources, targets = torch.tensor(movers, device=device), torch.tensor(holes, device=device)
        for layer in self.layers:
            layer.move_rows(sources, targets, rows)
        return order

    def shift(self, columns: int) -> None:
        for layer in self.layers:
            layer.shift(columns)
