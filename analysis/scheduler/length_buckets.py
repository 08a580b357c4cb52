"""Length buckets: quantile edges of observed lengths, the bucket of each value, and readable bucket labels.

Edges ``e_0 < ... < e_K`` make K buckets ``[e_k, e_k+1)``, the last one closed (``e_K-1 = e_K`` is a bucket of
one value); values below ``e_0`` or above ``e_K`` count in the end buckets.
"""

from __future__ import annotations

import numpy as np


def quantile_edges(values, n_buckets: int) -> np.ndarray:
    """Edges of up to ``n_buckets`` buckets holding about equal shares of ``values``: bucket k starts at the first
    value of the k-th share of the sorted values (ties merge buckets), and the last edge is the largest value. Every
    edge is an observed value, so no bucket is empty."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size == 0 or n_buckets < 1:
        raise ValueError("quantile buckets need at least one value and one bucket")
    starts = np.unique(v[(np.arange(n_buckets) * v.size) // n_buckets])
    return np.append(starts, v[-1])


def bucket_of(values, edges) -> np.ndarray:
    """Index of each value's bucket (0 .. len(edges) - 2)."""
    inner = np.asarray(edges, dtype=float)[1:-1]
    return np.searchsorted(inner, np.asarray(values, dtype=float), side="right")


def bucket_labels(edges) -> list[str]:
    """``[lo, hi)`` for every bucket, ``[lo, hi]`` for the last."""
    e = np.asarray(edges, dtype=float)
    return [f"[{lo:g}, {hi:g}{']' if k == len(e) - 2 else ')'}" for k, (lo, hi) in enumerate(zip(e[:-1], e[1:]))]
