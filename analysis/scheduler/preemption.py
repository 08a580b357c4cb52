"""Policy preemption on decode instances, limited TRAIL-style (Shahout et al., ICLR 2025).

With ``SimConfig.preemptive`` a continuous-batching instance compares, at every iteration boundary, the head of its
wait queue with its running requests: when the head cannot join (batch full or KV cache short) and a running request
has a larger policy key (SRPT: a longer predicted remaining length), that request is preempted (its KV cache is
dropped and recomputed on re-admission, as for memory preemptions) and the head takes its place.

The guard, as in TRAIL: a running request is preemptible only

- while it has generated fewer than ``preempt_limit * predicted_total`` tokens (``c`` times its initial predicted
  length: early on, while its KV cache is small and recomputing it is cheap), and
- while it has been preempted fewer than ``max_preemptions`` times (memory preemptions count too).

Either limit may be None (no limit). Memory preemptions (the next token does not fit) ignore the guard.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class PreemptionOptions(Protocol):
    """The fields of ``SimConfig`` read here."""

    batching: str
    preemptive: bool
    preempt_limit: float | None
    max_preemptions: int | None


def check_preemption_options(config: PreemptionOptions) -> None:
    """Raise ValueError on an impossible combination."""
    if config.preemptive and config.batching != "continuous":
        raise ValueError("preemption needs continuous batching")
    if not config.preemptive and (config.preempt_limit is not None or config.max_preemptions is not None):
        raise ValueError("the preemption limits go with preemptive=True")
    if config.preempt_limit is not None and not config.preempt_limit > 0:
        raise ValueError("preempt_limit must be positive (a fraction of the predicted length)")
    if config.max_preemptions is not None and config.max_preemptions < 1:
        raise ValueError("max_preemptions must be at least 1")


def preemption_label(config: PreemptionOptions) -> str:
    """`` preemptive`` plus its limits, or empty."""
    if not config.preemptive:
        return ""
    limits = ([f"c={config.preempt_limit:g}"] if config.preempt_limit is not None else []) + \
        ([f"max {config.max_preemptions}"] if config.max_preemptions is not None else [])
    return " preemptive" + (f" ({', '.join(limits)})" if limits else "")


def preemptible(running: np.ndarray, generated: np.ndarray, predicted_total: np.ndarray, preemptions: np.ndarray,
                config: PreemptionOptions) -> np.ndarray:
    """The running requests (ids) the guard lets the policy preempt."""
    keep = np.ones(len(running), dtype=bool)
    if config.preempt_limit is not None:
        keep &= generated[running] < config.preempt_limit * predicted_total[running]
    if config.max_preemptions is not None:
        keep &= preemptions[running] < config.max_preemptions
    return running[keep]
