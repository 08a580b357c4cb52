"""Train/val/test splits by prompt, so no prompt's samples leak across splits."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

SPLITS = ("train", "val", "test")


def split_of(prompt_key: object, seed: int = 42, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)) -> str:
    """Split of one prompt, from a seeded hash of its key: stable as the dataset grows."""
    if abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    digest = hashlib.sha256(f"{seed}:{prompt_key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < fractions[0]:
        return "train"
    return "val" if u < fractions[0] + fractions[1] else "test"


def split_by_prompt(prompt_keys: Iterable[object], seed: int = 42,
                    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)) -> dict[object, str]:
    """Map every distinct prompt key to ``train``/``val``/``test``."""
    return {key: split_of(key, seed, fractions) for key in dict.fromkeys(prompt_keys)}
