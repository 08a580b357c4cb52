"""Training of soft-label heads on fixed feature matrices (static EGTP predictor and PLP alike).

Paper settings are AdamW, batch 16, at most 10 epochs, lr 2e-5, seed 42, for fine-tuning with
~10^4-10^5 samples. Here the features are frozen and there are ~10^2 runs, so a small MLP head is
trained with lr 1e-3 for more epochs, and the epoch with the lowest validation MAE is kept
(early stopping on the prompt-disjoint validation split).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from analysis.core.soft_label_head import BINNINGS, LengthBins, SoftLabelHead, soft_label_loss
from analysis.core.training import fit_minibatch


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


def _mae(head: SoftLabelHead, x: torch.Tensor, y: torch.Tensor, batch: int = 4096) -> float:
    head.eval()
    with torch.no_grad():
        pred = torch.cat([head.predict(x[i:i + batch]) for i in range(0, len(x), batch)])
    return float((pred - y).abs().mean())


def train_head(x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor | None = None,
               y_val: torch.Tensor | None = None, config: HeadConfig | None = None,
               on_epoch: Callable[[int, int, dict], None] | None = None) -> TrainResult:
    """Fit a :class:`SoftLabelHead` on features [N, D] -> lengths [N] (bins fitted to ``y_train``).

    Without a validation set the last epoch is kept. ``on_epoch(epoch, epochs, row)`` reports progress.
    """
    cfg = config or HeadConfig()
    if len(x_train) < 2:
        raise ValueError(f"need at least 2 training samples, got {len(x_train)}")
    torch.manual_seed(cfg.seed)
    x_train, y_train = x_train.float(), y_train.float()
    head = SoftLabelHead(x_train.shape[1], fit_bins(cfg, y_train), cfg.hidden, cfg.dropout, cfg.architecture)
    head.fit_scaler(x_train, y_train)
    has_val = x_val is not None and y_val is not None and len(x_val) > 0
    val_score = (lambda model: _mae(model, x_val.float(), y_val.float())) if has_val else None
    best_epoch, history = fit_minibatch(
        head, x_train, y_train, lambda model, xb, yb: soft_label_loss(model, model(xb), yb, cfg.lam), cfg,
        val_score, on_epoch)
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

