"""Training of soft-label heads on fixed feature matrices (static EGTP predictor and PLP alike).

Paper settings are AdamW, batch 16, at most 10 epochs, lr 2e-5, seed 42, for fine-tuning with
~10^4-10^5 samples. Here the features are frozen and there are ~10^2 runs, so a small MLP head is
trained with lr 1e-3 for more epochs, and the epoch with the lowest validation MAE is kept
(early stopping on the prompt-disjoint validation split).

Runs that hit the token cap are censored (length >= cap). ``HeadConfig.censoring`` chooses what training does
with them: ``drop`` leaves them out (the default), ``aware`` keeps them in the censoring-aware soft-label loss
(:func:`lenscope.analysis.core.soft_label_head.soft_label_loss`). Given the validation rows' censored mask, early
stopping scores the clipped MAE (:func:`lenscope.analysis.core.metrics.clipped_mae`) over all of them.

:func:`train_heads` trains several heads side by side (the cross-validation's folds and seeds), each bit for bit
as :func:`train_head` trains it alone.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from lenscope.analysis.core.metrics import clipped_mae
from lenscope.analysis.core.soft_label_head import BINNINGS, LengthBins, SoftLabelHead, soft_labels
from lenscope.analysis.core.training import BestEpoch, minibatches, one_thread
from lenscope.analysis.egtp.stacked_heads import StackedHeads
from lenscope.models.atomic_files import save_tensors, write_text


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


@dataclass
class HeadTask:
    """One head to train (the arguments of :func:`train_head`)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    config: HeadConfig = field(default_factory=HeadConfig)
    on_epoch: Callable[[int, int, dict], None] | None = None
    censored_train: torch.Tensor | None = None
    censored_val: torch.Tensor | None = None


def train_head(x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor | None = None,
               y_val: torch.Tensor | None = None, config: HeadConfig | None = None,
               on_epoch: Callable[[int, int, dict], None] | None = None,
               censored_train: torch.Tensor | None = None, censored_val: torch.Tensor | None = None) -> TrainResult:
    """Fit a :class:`SoftLabelHead` on features [N, D] -> lengths [N] (bins fitted to ``y_train``).

    ``censored_train`` / ``censored_val`` (bool [N]) mark runs that hit the token cap (their length is the cap).
    With ``config.censoring == "aware"`` censored training rows enter the censoring-aware loss (the bins are fitted
    on all training lengths, caps included); with ``"drop"`` they are left out. Given ``censored_val``, early
    stopping scores the clipped MAE over all validation rows, else the plain MAE. Without a validation set the
    last epoch is kept. ``on_epoch(epoch, epochs, row)`` reports progress. AdamW on shuffled minibatches of
    ``config.batch_size`` (a last one of under 2 rows skipped), the epoch with the best validation score kept.
    """
    return train_heads([HeadTask(x_train, y_train, x_val, y_val, config or HeadConfig(), on_epoch, censored_train,
                                 censored_val)])[0]


def train_heads(tasks: Sequence[HeadTask]) -> list[TrainResult]:
    """Train every task's head as :func:`train_head` would alone, heads of one shape and optimisation side by side
    (:class:`lenscope.analysis.egtp.stacked_heads.StackedHeads`): for the cross-validation's folds and seeds, one
    batched step instead of one per head. Returns the results in the tasks' order."""
    prepared = [_prepare(task) for task in tasks]
    groups: dict[tuple, list[int]] = {}
    for i, (task, head, _) in enumerate(prepared):
        cfg = task.config
        key = (tuple(task.x_train.shape[1:]), head.architecture, cfg.hidden, cfg.bins, cfg.dropout, cfg.lam,
               cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.epochs, cfg.censoring)
        groups.setdefault(key, []).append(i)
    results: list[TrainResult | None] = [None] * len(tasks)
    n_threads = torch.get_num_threads()
    with one_thread():
        for members in groups.values():
            for i, result in zip(members, _train_group([prepared[i] for i in members], n_threads)):
                results[i] = result
    return results  # type: ignore[return-value]


@dataclass
class _Prepared:
    """A task's training data as the loop reads it: features, lengths, length bins, soft labels, censored flags."""

    x: torch.Tensor
    y: torch.Tensor
    bins: torch.Tensor  # each row's length bin
    labels: torch.Tensor
    censored: torch.Tensor | None


def _prepare(task: HeadTask) -> tuple[HeadTask, SoftLabelHead, _Prepared]:
    """Check a task, drop or keep its censored rows, and build its seeded head with its scaler fitted."""
    cfg = task.config
    if cfg.censoring not in CENSORING:
        raise ValueError(f"censoring must be one of {CENSORING}, not {cfg.censoring!r}")
    if cfg.censoring == "aware" and task.censored_train is None:
        raise ValueError('censoring="aware" needs the censored_train mask (which training runs hit the cap)')
    x_train, y_train = task.x_train.float(), task.y_train.float()
    cens = None if task.censored_train is None else torch.as_tensor(task.censored_train, dtype=torch.bool).reshape(-1)
    if cens is not None and cens.shape[0] != len(y_train):
        raise ValueError(f"censored_train has {cens.shape[0]} rows, y_train {len(y_train)}")
    if cens is not None and cfg.censoring == "drop":
        x_train, y_train, cens = x_train[~cens], y_train[~cens], None
    if len(x_train) < 2:
        raise ValueError(f"need at least 2 training samples, got {len(x_train)}")
    torch.manual_seed(cfg.seed)
    head = SoftLabelHead(x_train.shape[1], fit_bins(cfg, y_train), cfg.hidden, cfg.dropout, cfg.architecture)
    head.fit_scaler(x_train, y_train)
    bins = head.bins.index(y_train)
    censored = cens if cens is not None and bool(cens.any()) else None
    return task, head, _Prepared(x_train, y_train, bins, soft_labels(bins, head.bins.k), censored)


def _train_group(prepared: list[tuple[HeadTask, SoftLabelHead, _Prepared]], n_threads: int) -> list[TrainResult]:
    """The training loop of heads of one shape and optimisation (see :func:`train_heads`), on one thread but for
    the batched products and the optimiser's step, which take ``n_threads`` (the caller's) with the same bits."""
    tasks, heads, data = zip(*prepared)
    cfg = tasks[0].config
    stack = StackedHeads(heads, cfg.dropout, cfg.lr, cfg.weight_decay, [t.config.seed for t in tasks], n_threads)
    scores = [_val_score(t.x_val, t.y_val, t.censored_val) if t.x_val is not None and t.y_val is not None
              and len(t.x_val) > 0 else None for t in tasks]
    orders = [torch.Generator().manual_seed(t.config.seed) for t in tasks]
    best = [BestEpoch() for _ in tasks]
    histories: list[list[dict]] = [[] for _ in tasks]
    for epoch in range(1, cfg.epochs + 1):
        batches = [minibatches(torch.randperm(len(d.x), generator=g), cfg.batch_size) for d, g in zip(data, orders)]
        losses: list[list[float]] = [[] for _ in tasks]
        for position in range(max(len(b) for b in batches)):
            by_size: dict[int, list[int]] = {}
            for m, b in enumerate(batches):
                if position < len(b):
                    by_size.setdefault(len(b[position]), []).append(m)
            for which in by_size.values():
                rows = [(data[m], batches[m][position]) for m in which]
                censored = None
                if any(data[m].censored is not None for m in which):
                    censored = torch.stack([torch.zeros(len(r), dtype=torch.bool) if d.censored is None
                                            else d.censored[r] for d, r in rows])
                loss, leaves = stack.loss(which, _stacked(rows, "x"), _stacked(rows, "labels"), _stacked(rows, "y"),
                                          cfg.lam, None if censored is None else (_stacked(rows, "bins"), censored))
                loss.sum().backward()
                stack.step(which, leaves)
                for m, value in zip(which, loss.tolist()):
                    losses[m].append(value)
        for m, head in enumerate(heads):
            head.eval()
            row = {"epoch": epoch, "loss": float(np.mean(losses[m]))}
            if scores[m] is not None:
                with torch.no_grad():
                    row["val_mae"] = float(scores[m](head))
            histories[m].append(row)
            best[m].offer(head, epoch, row.get("val_mae"))
            if tasks[m].on_epoch:
                tasks[m].on_epoch(epoch, cfg.epochs, row)
    out = []
    for head, kept_epoch, history in zip(heads, best, histories):
        kept = copy.deepcopy(head)  # its own weights, no longer views of the stack
        kept.load_state_dict(kept_epoch.state)
        out.append(TrainResult(kept.eval(), kept_epoch.epoch, history))
    return out


def _stacked(rows: list[tuple[_Prepared, torch.Tensor]], field: str) -> torch.Tensor:
    """One field of several heads' minibatches, [heads, rows, ...]."""
    return torch.stack([getattr(data, field)[r] for data, r in rows])


def predict(head: SoftLabelHead, x: torch.Tensor) -> np.ndarray:
    """Predicted lengths (tokens) for features [N, D]."""
    head.eval()
    with torch.no_grad():
        return head.predict(x.float()).numpy()


def save_head(head: SoftLabelHead, path: Path, meta: dict) -> Path:
    """Write the head as ``path`` (safetensors) plus ``path.json`` (architecture and ``meta``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_tensors({k: v.contiguous() for k, v in head.state_dict().items()}, path)
    arch = {"in_dim": head.net[0].in_features, "hidden": head.net[0].out_features,
            "dropout": head.net[-2].p, "architecture": head.architecture}
    write_text(path.with_suffix(".json"), json.dumps({"arch": arch, "meta": meta}, indent=1))
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

