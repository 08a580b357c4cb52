"""Soft-label heads trained side by side (the cross-validation's folds and seeds in one batched loop) train bit for bit
as each would alone with torch's own layers, dropout and AdamW: same weights, kept epoch, losses and predictions."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from lenscope.analysis.core.soft_label_head import SoftLabelHead, soft_label_loss
from lenscope.analysis.core.training import fit_minibatch, one_thread
from lenscope.analysis.egtp.stacked_heads import StackedLinear
from lenscope.analysis.egtp.training import HeadConfig, HeadTask, TrainResult, fit_bins, train_head, train_heads

D = 24


def _alone(task: HeadTask) -> TrainResult:
    """A lone head trained with torch's nn.Linear, nn.Dropout and torch.optim.AdamW (fit_minibatch)."""
    cfg, x, y = task.config, task.x_train.float(), task.y_train.float()
    cens = None if task.censored_train is None else task.censored_train.bool()
    if cens is not None and cfg.censoring == "drop":
        x, y, cens = x[~cens], y[~cens], None
    torch.manual_seed(cfg.seed)
    head = SoftLabelHead(x.shape[1], fit_bins(cfg, y), cfg.hidden, cfg.dropout, cfg.architecture)
    head.fit_scaler(x, y)
    targets = y if cens is None else torch.stack([y, cens.float()], dim=1)

    def loss(model, xb, yb):
        if yb.ndim == 1:
            return soft_label_loss(model, model(xb), yb, cfg.lam)
        return soft_label_loss(model, model(xb), yb[:, 0], cfg.lam, censored=yb[:, 1] > 0.5)

    def val(model):
        return float((model.predict(task.x_val) - task.y_val).abs().mean())

    best, history = fit_minibatch(head, x, targets, loss, cfg, val)
    return TrainResult(head, best, history)


def _data(n: int, seed: int, d: int = D) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, x[:, 0].abs() * 80 + 4 + torch.rand(n, generator=g) * 40, torch.rand(n, generator=g) < 0.15


@pytest.mark.parametrize("config", [HeadConfig(hidden=16), HeadConfig(architecture="official", bins_kind="p1-p99"),
                                    HeadConfig(hidden=16, lam=1.0, bins_kind="linear", dropout=0.0),
                                    HeadConfig(hidden=16, censoring="aware")],
                         ids=["default", "official", "ce-only", "censoring-aware"])
def test_heads_side_by_side_train_bit_for_bit_as_alone(config):
    """Bit for bit on the BLAS of the project's machines (MKL on Intel Xeon and on AMD EPYC): a property of that
    BLAS, which runs the same kernel for the lone and the stacked products at these shapes, not of the code (the
    layer's own test bounds what another BLAS may change)."""
    tasks = []
    for k, n in enumerate((100, 98, 113, 97)):  # last minibatches of 4, 2, 1 (skipped) and 1 rows
        x, y, censored = _data(n, k)
        x_val, y_val, _ = _data(30, 100 + k)
        tasks.append(HeadTask(x, y, x_val, y_val, replace(config, epochs=4, seed=k % 3), None,
                              censored if config.censoring == "aware" else None))
    together = train_heads(tasks)
    for task, result in zip(tasks, together):
        alone = _alone(task)
        assert result.best_epoch == alone.best_epoch
        assert [r["loss"] for r in result.history] == [r["loss"] for r in alone.history]
        assert [r["val_mae"] for r in result.history] == [r["val"] for r in alone.history]
        mine, theirs = result.head.state_dict(), alone.head.state_dict()
        assert all(torch.equal(mine[name], theirs[name]) for name in theirs)
        assert torch.equal(result.head.predict(task.x_val), alone.head.predict(task.x_val))
    assert len({float(r.history[-1]["loss"]) for r in together}) == len(tasks)  # four different trainings


def test_heads_of_the_study_s_shape_train_bit_for_bit_as_alone():
    """576 pooled features, 256 hidden units, folds of different sizes: the last minibatches of an epoch train some
    heads alone (one thread) and the others side by side (two)."""
    tasks = [HeadTask(*_data(n, k, 576)[:2], *_data(40, 9 + k, 576)[:2], HeadConfig(epochs=2, seed=k))
             for k, n in enumerate((70, 67, 77))]
    for task, result in zip(tasks, train_heads(tasks)):
        alone = _alone(task)
        assert all(torch.equal(a, b) for a, b in zip(result.head.state_dict().values(),
                                                     alone.head.state_dict().values()))


def test_a_head_alone_and_beside_others_is_the_same_head():
    tasks = [HeadTask(*_data(60 + k, k)[:2], *_data(20, 50 + k)[:2], HeadConfig(hidden=16, epochs=3, seed=k))
             for k in range(3)]
    together = train_heads(tasks)
    alone = train_head(tasks[1].x_train, tasks[1].y_train, tasks[1].x_val, tasks[1].y_val, tasks[1].config)
    assert all(torch.equal(a, b) for a, b in zip(alone.head.state_dict().values(),
                                                together[1].head.state_dict().values()))
    assert together[1].head.net[0].weight.is_contiguous()  # the kept head owns its weights, no view of the stack


ROWS = [1, 2, 5, 16, 37, 64]
SHAPES = [(40, 12), (576, 256), (256, 20), (1153, 256), (576, 288)]  # EGTP head, its output, PLP, official head
U = 2.0 ** -24  # float32's unit roundoff


def _stacked(x, weight, bias, grad, n_threads):
    """StackedLinear's output and gradients (x, weight, bias) for upstream ``grad``."""
    x, weight, bias = (t.detach().clone().requires_grad_() for t in (x, weight, bias))
    out = StackedLinear.apply(x, weight, bias, n_threads)
    out.backward(grad)
    return out.detach(), x.grad, weight.grad, bias.grad


def _within_rounding(a: torch.Tensor, b: torch.Tensor, magnitude: torch.Tensor, n: int) -> bool:
    """Whether two float32 sums of ``n`` terms in any order, ``a`` and ``b``, agree as rounding allows: each is
    within gamma_n * sum|terms| of the exact sum (gamma_n = n u / (1 - n u)), so they differ by at most twice that."""
    gamma = n * U / (1 - n * U)
    return bool(((a.double() - b.double()).abs() <= 2 * gamma * magnitude).all())


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("shape", SHAPES)
def test_stacked_linear_is_bit_for_bit_the_same_on_one_and_two_threads(rows, shape):
    """Same kernel, same stack: the batched products split the heads between threads, never a head's sums, so the
    thread count changes no bit (the guarantee the side-by-side training rests on, on any CPU)."""
    (d_in, d_out), heads = shape, 3
    x, weight, bias = torch.randn(heads, rows, d_in), torch.randn(heads, d_out, d_in), torch.randn(heads, d_out)
    grad = torch.randn(heads, rows, d_out)
    with one_thread():
        alone = _stacked(x, weight, bias, grad, 1)
    for a, b in zip(_stacked(x, weight, bias, grad, 2), alone):
        assert torch.equal(a, b)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("shape", SHAPES)
def test_stacked_linear_equals_the_lone_layer_within_float32_rounding(rows, shape):
    """Against torch's own layer (another kernel: mm, not the batched product) every head's output and gradients
    agree within the bound float32 rounding sets for the two orders of summation; bit for bit on one CPU's BLAS
    (Intel's, mostly) but not on another's (AMD EPYC: the 1,153-wide input gradient for 1 or 2 rows)."""
    (d_in, d_out), heads = shape, 3
    x, weight, bias = torch.randn(heads, rows, d_in), torch.randn(heads, d_out, d_in), torch.randn(heads, d_out)
    grad = torch.randn(heads, rows, d_out)
    out, x_grad, w_grad, b_grad = _stacked(x, weight, bias, grad, 2)
    with one_thread():
        for m in range(heads):
            xm, wm, bm = (t[m].clone().requires_grad_() for t in (x, weight, bias))
            lone = F.linear(xm, wm, bm)
            lone.backward(grad[m])
            ax, aw, ab, ag = (t[m].double().abs() for t in (x, weight, bias, grad))
            assert _within_rounding(out[m], lone, ax @ aw.T + ab, d_in + 1)
            assert _within_rounding(x_grad[m], xm.grad, ag @ aw, d_out)
            assert _within_rounding(w_grad[m], wm.grad, ag.T @ ax, rows)
            assert _within_rounding(b_grad[m], bm.grad, ag.sum(0), rows)
