"""Token pooling of hidden states: entropy-guided (EGTP) and the ablation poolings.

EGTP pairs the hidden state ``h_i`` of token ``i`` with the entropy ``H_i`` of the next-token
distribution computed at the same position (the convention of :class:`lenscope.models.target.SequenceFeatures`),
weights ``w = softmax(H / alpha)`` and returns ``sum_i w_i h_i``. ``alpha`` is the temperature: large
``alpha`` tends to mean pooling, small ``alpha`` to picking the most uncertain token. All functions are
differentiable torch code (the attribution runs gradients through them).
"""

from __future__ import annotations

import torch

POOLINGS = ("egtp", "mean", "max", "last")


def _check(hidden: torch.Tensor, entropy: torch.Tensor, method: str, alpha: float) -> None:
    if method not in POOLINGS:
        raise ValueError(f"unknown pooling {method!r}; choose from {POOLINGS}")
    if hidden.ndim != 2 or entropy.ndim != 1 or hidden.shape[0] != entropy.shape[0] or hidden.shape[0] == 0:
        raise ValueError(f"need hidden [T, d] and entropy [T] with T > 0, got {tuple(hidden.shape)} "
                         f"and {tuple(entropy.shape)}")
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")


def entropy_weights(entropy: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """EGTP weights ``softmax(H / alpha)`` over the token axis (last dimension)."""
    return torch.softmax(entropy.to(torch.float32) / alpha, dim=-1)


def pool(hidden: torch.Tensor, entropy: torch.Tensor, method: str = "egtp", alpha: float = 1.0) -> torch.Tensor:
    """One vector [d] from the states [T, d] of a token span."""
    _check(hidden, entropy, method, alpha)
    if method == "egtp":
        return entropy_weights(entropy, alpha).to(hidden.dtype) @ hidden
    if method == "mean":
        return hidden.mean(0)
    if method == "max":
        return hidden.max(0).values
    return hidden[-1]


def prefix_pool(hidden: torch.Tensor, entropy: torch.Tensor, method: str = "egtp", alpha: float = 1.0) -> torch.Tensor:
    """Row ``t`` is ``pool(hidden[:t+1], entropy[:t+1])``, for every prefix at once ([T, d]).

    Used for the generated-token summary of PLP, where a prediction is made after every decoding step.
    EGTP uses cumulative sums of ``exp((H - max H) / alpha)``, exact for every prefix.
    """
    _check(hidden, entropy, method, alpha)
    h = hidden.to(torch.float64)
    if method == "egtp":
        e = torch.exp((entropy.to(torch.float64) - entropy.max()) / alpha)
        out = (e[:, None] * h).cumsum(0) / e.cumsum(0)[:, None]
    elif method == "mean":
        out = h.cumsum(0) / torch.arange(1, h.shape[0] + 1, dtype=h.dtype)[:, None]
    elif method == "max":
        out = h.cummax(0).values
    else:
        out = h
    return out.to(hidden.dtype)
