"""The slot KV cache: rows join (right-aligned), leave (slots refilled from the tail) and columns trim,
always matching a cache rebuilt from scratch; masked columns never hold NaN."""

import torch

from lenscope.models.kv_slots import GROWTH, MIN_COLUMNS, SlotCache


class _Prefilled:
    """A stand-in for a prefilled DynamicCache: layers with ``keys`` / ``values``."""

    def __init__(self, tensors):
        self.layers = [type("L", (), {"keys": k, "values": v}) for k, v in tensors]


def _rows(n, width, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 2, width, 3, generator=g), torch.randn(n, 2, width, 3, generator=g)) for _ in range(2)]


def _expected(rows):
    """Right-aligned stack of per-row keys of layer 0, zero-padded on the left."""
    width = max(r.shape[1] for r in rows)
    return torch.stack([torch.cat([r.new_zeros(2, width - r.shape[1], 3), r], dim=1) for r in rows])


def test_rows_join_leave_and_trim_like_a_rebuilt_cache():
    cache = SlotCache(num_layers=2, slots=4)
    a, b = _rows(2, 5, 0), _rows(2, 8, 1)
    cache.add_rows(_Prefilled(a))
    live = [a[0][0][0], a[0][0][1]]
    step = torch.randn(2, 2, 1, 3)
    for layer in cache.layers:
        layer.update(step, step)
    live = [torch.cat([r, step[i]], dim=1) for i, r in enumerate(live)]
    cache.add_rows(_Prefilled(b))  # wider than the live block: the old rows shift right
    live += [b[0][0][0], b[0][0][1]]
    got = cache.layers[0].keys
    assert got.shape == (4, 2, 8, 3)
    for i, row in enumerate(live):
        torch.testing.assert_close(got[i, :, 8 - row.shape[1]:], row)
    order = cache.keep([1, 3])  # slot 0 is refilled by row 3, row 1 stays
    assert order == [3, 1]
    got = cache.layers[0].keys
    torch.testing.assert_close(got[0], _expected([live[3]])[0][:, -8:])
    torch.testing.assert_close(got[1, :, -6:], live[1])
    cache.shift(-2)
    assert cache.length == 6 and cache.layers[1].keys.shape == (2, 2, 6, 3)
    torch.testing.assert_close(cache.layers[0].keys[1], live[1])
    assert torch.isfinite(cache.layers[0].buf_k).all()


def test_growth_keeps_live_data_and_stays_within_a_quarter_of_the_length():
    cache = SlotCache(num_layers=1, slots=2)
    cache.add_rows(_Prefilled(_rows(1, 3, 2)[:1]))
    first = cache.layers[0].keys.clone()
    for _ in range(1100):
        cache.layers[0].update(torch.ones(1, 2, 1, 3), torch.ones(1, 2, 1, 3))
        columns = cache.layers[0].buf_k.shape[2]
        assert cache.length <= columns <= cache.length + max(cache.length // GROWTH, MIN_COLUMNS)
    assert cache.length == 1103
    torch.testing.assert_close(cache.layers[0].keys[:, :, :3], first)
