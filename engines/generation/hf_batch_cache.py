"""A left-padded, batched KV cache for continuous batching with transformers models.

Rows are sequences; every row has the same length ``T`` along the sequence dimension, and a
row shorter than the longest holds padding on its left, marked 0 in :attr:`BatchKVCache.mask`
(shape ``[B, T]``, 1 for real tokens). Each sequence gets its own ``position_ids`` so the
padding changes nothing it attends to: the attention mask hides the padded cells and RoPE sees
the sequence's own positions.

Storage per layer is a preallocated buffer ``[B, kv_heads, capacity, head_dim]`` that grows by
doubling, so a decode step writes one column in place instead of concatenating the whole cache
(transformers' ``DynamicLayer`` copies every layer on every step). Copies happen only when
sequences join (:meth:`BatchKVCache.extend`) or leave (:meth:`BatchKVCache.keep`), and when a
buffer runs out of room.

Only full-attention caches are supported (every layer a plain ``DynamicLayer``); sliding-window
and linear-attention layers keep state this layout does not model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

if TYPE_CHECKING:
    from transformers import PretrainedConfig

MIN_CAPACITY = 64  # cells allocated at least per row, so short prompts do not regrow at once


class GrowableLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values are views into a buffer with spare columns.

    ``self.keys``/``self.values`` are ``buffer[:, :, :length]`` so every transformers code path
    that reads them (mask sizes, ``get_seq_length``) sees the used part only.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self.length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key_states``/``value_states`` (``[B, heads, n, head_dim]``); return all cached."""
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True
        needed = self.length + key_states.shape[-2]
        if self._key_buffer is None or needed > self._key_buffer.shape[-2]:
            self._grow(key_states, value_states, needed)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[:, :, self.length : needed] = key_states
        self._value_buffer[:, :, self.length : needed] = value_states
        self.length = needed
        self.keys = self._key_buffer[:, :, :needed]
        self.values = self._value_buffer[:, :, :needed]
        return self.keys, self.values

    def _grow(self, key_like: torch.Tensor, value_like: torch.Tensor, needed: int) -> None:
        capacity = max(
            MIN_CAPACITY, needed, 2 * (self._key_buffer.shape[-2] if self._key_buffer is not None else 0)
        )
        keys = key_like.new_zeros((*key_like.shape[:2], capacity, key_like.shape[-1]))
        values = value_like.new_zeros((*value_like.shape[:2], capacity, value_like.shape[-1]))
        if self._key_buffer is not None and self.length:
            keys[:, :, : self.length] = self._key_buffer[:, :, : self.length]
            values[:, :, : self.length] = self._value_buffer[:, :, : self.length]
        self._key_buffer, self._value_buffer = keys, values

    def assign(self, keys: torch.Tensor, values: torch.Tensor, spare: int) -> None:
        """Hold exactly ``keys``/``values`` (``[B, heads, T, head_dim]``) plus ``spare`` free columns."""
        length = keys.shape[-2]
        self._key_buffer = keys.new_zeros((*keys.shape[:2], length + spare, keys.shape[-1]))
        self._value_buffer = values.new_zeros((*values.shape[:2], length + spare, values.shape[-1]))
        self._key_buffer[:, :, :length] = keys
        self._value_buffer[:, :, :length] = values
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.length = length
        self.keys = self._key_buffer[:, :, :length]
        self.values = self._value_buffer[:, :, :length]

    @property
    def allocated_bytes(self) -> int:
        """Bytes of both buffers (capacity, not just the used part)."""
        if self._key_buffer is None or self._value_buffer is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self._key_buffer, self._value_buffer))


class BatchKVCache(DynamicCache):
    """A ``DynamicCache`` of :class:`GrowableLayer` layers plus the batch's padding mask.

    Attributes:
        mask: ``[B, T]`` int64, 1 for a real token, 0 for left padding (None while empty).

    """

    def __init__(self) -> None:
        # Cache.__init__ directly: DynamicCache's own would build DynamicLayer layers from a config.
        Cache.__init__(self, layer_class_to_replicate=GrowableLayer)
        self.mask: torch.Tensor | None = None

    @staticmethod
    def supports(config: PretrainedConfig) -> bool:
        """Whether the model's cache is full attention in every layer (the layout this class models)."""
        probe = DynamicCache(config=config)
        return all(type(layer) is DynamicLayer for layer in probe.layers)

    @property
    def batch_size(self) -> int:
        """Rows (sequences) in the cache."""
        return 0 if self.mask is None else self.mask.shape[0]

    def step_mask(self, new_tokens: int) -> torch.Tensor:
        """Attention mask for a forward that appends ``new_tokens`` real tokens to every row.

        Returns ``[B, T + new_tokens]``; the stored :attr:`mask` grows to it.
        """
        assert self.mask is not None
        ones = self.mask.new_ones((self.mask.shape[0], new_tokens))
        self.mask = torch.cat([self.mask, ones], dim=1)
        return self.mask

    @property
    def allocated_bytes(self) -> int:
        """Bytes held by every layer's key and value buffers."""
        return sum(layer.allocated_bytes for layer in self.layers if isinstance(layer, GrowableLayer))

    def keep(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order) and drop the left padding they all share (copies once)."""
        assert self.mask is not None
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        # First column where any kept row has a real token: everything before it is shared padding.
        real = mask.any(dim=0).nonzero()
        start = int(real[0]) if len(real) else mask.shape[1]
        self.mask = mask[:, start:].contiguous()
        for layer in self.layers:
            assert isinstance(layer, GrowableLayer)
            keys = layer.keys.index_select(0, index.to(layer.keys.device))[:, :, start:]
            values = layer.values.index_select(0, index.to(layer.values.device))[:, :, start:]
            layer.assign(keys, values, spare=MIN_CAPACITY)

    def extend(self, other: BatchKVCache) -> None:
        """Append the rows of ``other`` after this cache's rows, left-padding the shorter side."""
        assert other.mask is not None
        if self.mask is None:
            self.mask = other.mask
            self.layers = other.layers
            return
        length = max(self.mask.shape[1], other.mask.shape[1])
        self.mask = torch.cat([_left_pad(self.mask, length), _left_pad(other.mask, length)], dim=0)
        for mine, theirs in zip(self.layers, other.layers, strict=True):
            assert isinstance(mine, GrowableLayer) and isinstance(theirs, GrowableLayer)
            keys = torch.cat([_left_pad(mine.keys, length, dim=2), _left_pad(theirs.keys, length, dim=2)])
            values = torch.cat(
                [_left_pad(mine.values, length, dim=2), _left_pad(theirs.values, length, dim=2)]
            )
            mine.assign(keys, values, spare=MIN_CAPACITY)


def _left_pad(tensor: torch.Tensor, length: int, dim: int = 1) -> torch.Tensor:
    """``tensor`` with zeros prepended along ``dim`` up to ``length``."""
    missing = length - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
