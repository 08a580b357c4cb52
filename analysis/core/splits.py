"""Train/val/test splits by source task, fixed per task and identical in every store.

A task is where a prompt came from (``source:ref``, e.g. a HumanEval task id or a ShareGPT conversation id),
so the plain, chain-of-thought and RL wrappers of one task, and every sample of one prompt, share a split.
Prompts without a reference (typed by a user) are their own task, keyed by their text. The split is a hash
of the task key alone: no training seed, no database id, so two stores and two training runs agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

SPLITS = ("train", "val", "test")
FRACTIONS = (0.7, 0.15, 0.15)
SALT = "lenscope-task-split-1"


def task_key(source: str, ref: str, text: str) -> str:
    """The task a prompt belongs to: ``source:ref``, or a hash of the text when there is no reference."""
    if ref:
        return f"{source}:{ref}"
    return "text:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def split_of(task: str, fractions: tuple[float, float, float] = FRACTIONS) -> str:
    """Split of one task, from a hash of its key: stable as the dataset grows."""
    if abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    digest = hashlib.sha256(f"{SALT}:{task}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < fractions[0]:
        return "train"
    return "val" if u < fractions[0] + fractions[1] else "test"


def evaluation_split(splits: Iterable[str]) -> str:
    """The split metrics are reported on: test, else val, else train (tiny datasets)."""
    present = set(splits)
    return next(s for s in ("test", "val", "train") if s in present)
