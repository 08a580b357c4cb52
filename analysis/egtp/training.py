"""Training of soft-label heads on fixed feature matrices (static EGTP predictor and PLP alike).

Paper settings are AdamW, batch 16, at most 10 epochs, lr 2e-5, seed 42, for fine-tuning with
~10^4-10^5 samples. Here the features are frozen and there are ~10^2 runs, so a small MLP head is
trained with lr 1e-3 for more epochs, and the epoch with the lowest validation MAE is kept
(early stopping on the prompt-disjoint validation split).

Runs that hit the token cap are censored (length >= cap). ``HeadConfig.censoring`` chooses what training does
with them: ``drop`` leaves them out (the default), ``aware`` keeps them in the censoring-aware soft-label loss
(:func:`lenscope.analysis.core.soft_label_head.soft_label_loss`). Given the validation rows' censored mask, early
stopping scores the clipped MAE (:func:`lenscope.analysis.core.metrics.clipped_mae`) over all of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from lenscope.analysis.core.metrics import clipped_mae
from lenscope.analysis.core.soft_label_head import BINNINGS, LengthBins, SoftLabelHead, soft_label_loss
from lenscope.analysis.core.training import fit_minibatch


@dataclass
class HeadConfig:
    """Hyper-parameters of a soft-label head and of its training."""

    bins: int = 20
    bins_kind: str = "log"
    architecture: str = "mlp"
    lam: float = 0.95
    hidden: int = 256
    dropout: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 0.01
    batch_size: int = 16
    epochs: int = 60
    seed: int = 42
    censoring: str = "drop"  # censored training runs: "drop" (left out) or "aware" (censoring-aware loss)


CENSORING = ("drop", "aware")


@dataclass
class TrainResult:
    """A trained head (a :class:`SoftLabelHead`, or an attention-pooling head around one), the epoch kept, and
    per-epoch train loss / validation MAE."""

    head: torch.nn.Module
    best_epoch: int
    history: list[dict]


def fit_bins(config: HeadConfig, lengths: torch.Tensor) -> LengthBins:
    """The config's length bins (``bins_kind``, ``bins``) fitted to the training ``lengths``."""
    if config.bins_kind not in BINNINGS:
        raise ValueError(f"bins_kind must be one of {sorted(BINNINGS)}, not {config.bins_kind!r}")
    return BINNINGS[config.bins_kind](lengths.float().numpy(), config.bins)


def _predict_batched(head: SoftLabelHead, x: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    head.eval()
    with torch.no_grad():
        return torch.cat([head.predict(x[i:i + batch]) for i in range(0, len(x), batch)])


def _mae(head: SoftLabelHead, x: torch.Tensor, y: torch.Tensor, batch: int = 4096) -> float:
    return float((_predict_batched(head, x, batch) - y).abs().mean())


def _val_score(x_val: torch.Tensor, y_val: torch.Tensor,
               censored_val: torch.Tensor | None) -> Callable[[SoftLabelHead], float]:
    """Early-stopping score: the clipped MAE over all validation rows given their censored mask, else the MAE."""
    x, y = x_val.float(), y_val.float()
    if censored_val is None:
        return lambda model: _mae(model, x, y)
    cens = torch.as_tensor(censored_val, dtype=torch.bool).reshape(-1).numpy()
    if cens.shape[0] != len(y):
        raise ValueError(f"censored_val has {cens.shape[0]} rows, y_val {len(y)}")
    return lambda model: clipped_mae(_predict_batched(model, x).numpy(), y.numpy(), cens, y.numpy())


def train_head(x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor | None = None,
               y_val: torch.Tensor | None = None, config: HeadConfig | None = None,
               on_epoch: Callable[[int, int, dict], None] | None = None,
               censored_train: torch.Tensor | None = None, censored_val: torch.Tensor | None = None) -> TrainResult:
    """Fit a :class:`SoftLabelHead` on features [N, D] -> lengths [N] (bins fitted to ``y_train``).

    ``censored_train`` / ``censored_val`` (bool [N]) mark runs that hit the token cap (their length is the cap).
    With ``config.censoring == "aware"`` censored training rows enter the censoring-aware loss (the bins are fitted
    on all training lengths, caps included); with ``"drop"`` they are left out. Given ``censored_val``, early
    stopping scores the clipped MAE over all validation rows, else the plain MAE. Without a validation set the
    last epoch is kept. ``on_epoch(epoch, epochs, row)`` reports progress.
    """
    cfg = config or HeadConfig()
    if cfg.censoring not in CENSORING:
        raise ValueError(f"censoring must be one of {CENSORING}, not {cfg.censoring!r}")
    if cfg.censoring == "aware" and censored_train is None:
        raise ValueError('censoring="aware" needs the censored_train mask (which training runs hit the cap)')
    x_train, y_train = x_train.float(), y_train.float()
    cens = None if censored_train is None else torch.as_tensor(censored_train, dtype=torch.bool).reshape(-1)
    if cens is not None and cens.shape[0] != len(y_train):
        raise ValueError(f"censored_train has {cens.shape[0]} rows, y_train {len(y_train)}")
    if cens is not None and cfg.censoring == "drop":
        x_train, y_train, cens = x_train[~cens], y_train[~cens], None
    if len(x_train) < 2:
        raise ValueError(f"need at least 2 training samples, got {len(x_train)}")
    torch.manual_seed(cfg.seed)
    head = SoftLabelHead(x_train.shape[1], fit_bins(cfg, y_train), cfg.hidden, cfg.dropout, cfg.architecture)
    head.fit_scaler(x_train, y_train)
    has_val = x_val is not None and y_val is not None and len(x_val) > 0
    val_score = _val_score(x_val, y_val, censored_val) if has_val else None
    targets = y_train if cens is None else torch.stack([y_train, cens.float()], dim=1)

    def loss(model: SoftLabelHead, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        if yb.ndim == 1:
            return soft_label_loss(model, model(xb), yb, cfg.lam)
        # the censored flag travels as y's second column through fit_minibatch's index slicing
        return soft_label_loss(model, model(xb), yb[:, 0], cfg.lam, censored=yb[:, 1] > 0.5)

    best_epoch, history = fit_minibatch(head, x_train, targets, loss, cfg, val_score, on_epoch)
    for row in history:
        if "val" in row:
            row["val_mae"] = row.pop("val")
    return TrainResult(head, best_epoch, history)


def predict(head: SoftLabelHead, x: torch.Tensor) -> np.ndarray:
    """Predicted lengths (tokens) for features [N, D]."""
    head.eval()
    with torch.no_grad():
        return head.predict(x.float()).numpy()


def save_head(head: SoftLabelHead, path: Path, meta: dict) -> Path:
    """Write the head as ``path`` (safetensors) plus ``path.json`` (architecture and ``meta``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(path))
    arch = {"in_dim": head.net[0].in_features, "hidden": head.net[0].out_features,
            "dropout": head.net[-2].p, "architecture": head.architecture}
    path.with_suffix(".json").write_text(json.dumps({"arch": arch, "meta": meta}, indent=1))
    return path


def load_head(path: Path) -> tuple[SoftLabelHead, dict]:
    """Read a head written by :func:`save_head`; returns (head, meta)."""
    info = json.loads(Path(path).with_suffix(".json").read_text())
    state = load_file(str(path))
    bins = LengthBins(state["inner_edges"], state["centers"])
    arch = info["arch"]
    head = SoftLabelHead(arch["in_dim"], bins, arch["hidden"], arch["dropout"], arch.get("architecture", "mlp"))
    state.setdefault("length_scale", head.length_scale)  # heads saved before the scale was a buffer
    head.load_state_dict(state)
    return head.eval(), info["meta"]

