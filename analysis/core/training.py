"""Minibatch training loop shared by the length heads (EGTP soft-label head, bucket classifiers, the
learning-to-rank scorer): AdamW, shuffled minibatches, and the epoch with the best validation score kept
(early stopping)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import torch
from torch import nn

BatchLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


class TrainingConfig(Protocol):
    """The optimisation fields a training config must have (e.g. ``HeadConfig``)."""

    lr: float
    weight_decay: float
    batch_size: int
    epochs: int
    seed: int


@contextlib.contextmanager
def threads(count: int) -> Iterator[None]:
    """torch on ``count`` intra-op threads while inside, the calling thread's count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_thread() -> contextlib.AbstractContextManager[None]:
    """:func:`threads` (1): a small head's 64-row minibatch (a few hundred thousand weights) took 1.7 ms on one
    thread against 2.1 ms on two of this project's 2 cores, which hand work over more than they compute; a probe's
    256-row one, the same."""
    return threads(1)


def minibatches(order: torch.Tensor, size: int) -> list[torch.Tensor]:
    """An epoch's minibatches of the shuffled row ``order``, a last one of under 2 rows skipped."""
    return [order[i:i + size] for i in range(0, len(order), size) if len(order[i:i + size]) >= 2]


class BestEpoch:
    """Early stopping's record: the epoch with the lowest validation score so far (the latest, without validation)
    and the model's state at its end."""

    def __init__(self) -> None:
        self.score, self.epoch, self.state = float("inf"), 0, None

    def offer(self, model: nn.Module, epoch: int, score: float | None) -> None:
        """Keep ``model``'s state if ``epoch`` scores lower than the kept one (``score`` None: always)."""
        score = -epoch if score is None else score
        if score < self.score:
            self.score, self.epoch, self.state = score, epoch, {k: v.clone() for k, v in model.state_dict().items()}


def fit_minibatch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: BatchLoss, config: TrainingConfig,
                  val_score: Callable[[nn.Module], float] | None = None,
                  on_epoch: Callable[[int, int, dict], None] | None = None) -> tuple[int, list[dict]]:
    """Train ``model`` in place on (x, y) with ``loss_fn(model, xb, yb)`` on one thread (:func:`one_thread`); keep
    the epoch with the lowest ``val_score(model)`` (the last one without it). Returns (kept epoch, per-epoch
    history)."""
    if len(x) < 2:
        raise ValueError(f"need at least 2 training samples, got {len(x)}")
    with one_thread():
        return _fit(model, x, y, loss_fn, config, val_score, on_epoch)


def _fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: BatchLoss, config: TrainingConfig,
         val_score: Callable[[nn.Module], float] | None,
         on_epoch: Callable[[int, int, dict], None] | None) -> tuple[int, list[dict]]:
    torch.manual_seed(config.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    gen = torch.Generator().manual_seed(config.seed)
    best, history = BestEpoch(), []
    for epoch in range(1, config.epochs + 1):
        model.train()
        losses = []
        for idx in minibatches(torch.randperm(len(x), generator=gen), config.batch_size):
            loss = loss_fn(model, x[idx], y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        model.eval()
        row = {"epoch": epoch, "loss": float(np.mean(losses))}
        if val_score is not None:
            with torch.no_grad():
                row["val"] = float(val_score(model))
        history.append(row)
        best.offer(model, epoch, row.get("val"))
        if on_epoch:
            on_epoch(epoch, config.epochs, row)
    model.load_state_dict(best.state)
    model.eval()
    return best.epoch, history
