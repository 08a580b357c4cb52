"""Several soft-label heads trained side by side as one: their weights stacked along a leading head axis, so a step
of M heads is one batched product per layer instead of M small ones. On 2 cores a small head's step is mostly
per-operation overhead, which this pays once for all M.

Each head keeps what makes its training its own: its seed's initialisation, minibatch order and dropout masks
(drawn from its own generator, in the order a lone training draws them from the global one), its optimiser state
and step count. The batched products equal the lone ones slice for slice, so each head trains exactly as it would
alone (:func:`lenscope.analysis.egtp.training.train_heads`; a test checks it bit for bit).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.optim.adamw import adamw

from lenscope.analysis.core.soft_label_head import SoftLabelHead
from lenscope.analysis.core.training import threads

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW's defaults, which the lone training uses


class StackedLinear(torch.autograd.Function):
    """``nn.Linear`` of M heads at once on ``n_threads``: x [M, B, in], weight [M, out, in], bias [M, out]. Its
    backward writes the weight's gradient in the weight's layout with one batched product; autograd's own, through
    a transposed view, makes it [M, in, out] and then copies it over, at 5x the product's time. The thread count
    changes no bit (the batched products split the heads between threads, not a head's sums). Against the lone layer
    (torch's mm, another kernel) each slice agrees within float32's rounding bound on any CPU, and bit for bit where
    the BLAS runs one kernel for both (Intel's MKL; AMD EPYC differs in the last bits for 1,153-wide inputs of 1-2
    rows); tests check both at the study's shapes."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, n_threads: int = 1) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.n_threads = n_threads
        with threads(n_threads):
            return torch.baddbmm(bias[:, None], x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        with threads(ctx.n_threads):
            grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
            return grad_x, torch.bmm(grad.transpose(1, 2), x), grad.sum(1), None


class StackedHeads:
    """``heads`` (one architecture and shape) stacked for training: each head's parameters become views of one
    stacked tensor per parameter, so ``heads[m]`` predicts, scores and saves with the weights as they are.
    ``n_threads`` run the batched products and the optimiser's elementwise step, whose results do not depend on it;
    everything else runs on the caller's threads (one, for a lone head's bits)."""

    def __init__(self, heads: Sequence[SoftLabelHead], dropout: float, lr: float, weight_decay: float,
                 seeds: Sequence[int], n_threads: int = 1) -> None:
        self.heads = list(heads)
        self.architecture = self.heads[0].architecture
        self.dropout = 0.1 if self.architecture == "official" else dropout
        self.lr, self.weight_decay, self.n_threads = lr, weight_decay, n_threads
        self.names = [name for name, _ in self.heads[0].named_parameters()]
        self.params = {name: torch.stack([dict(h.named_parameters())[name].detach() for h in self.heads])
                       for name in self.names}
        for m, head in enumerate(self.heads):
            for name, param in head.named_parameters():
                param.data = self.params[name][m]
        self.exp_avg = {name: torch.zeros_like(p) for name, p in self.params.items()}
        self.exp_avg_sq = {name: torch.zeros_like(p) for name, p in self.params.items()}
        self.steps = [{name: torch.tensor(0.0) for name in self.names} for _ in self.heads]
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        self._buffers = {name: torch.stack([getattr(h, name) for h in self.heads])
                         for name in ("feat_mean", "feat_std", "centers", "length_scale")}

    def loss(self, which: list[int], x: torch.Tensor, targets: torch.Tensor, lengths: torch.Tensor, lam: float,
             censoring: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Per head (``which``, positions) the soft-label loss of its minibatch (x [G, B, D], soft labels [G, B, K],
        lengths [G, B]; ``censoring``: the rows' length bins and censored flags [G, B], or None), and the leaf
        parameters whose gradients it sends back."""
        full = len(which) == len(self.heads)
        leaves = {name: (p if full else p[which]).detach().requires_grad_() for name, p in self.params.items()}
        buf = {name: b if full else b[which] for name, b in self._buffers.items()}
        logits = self._logits(which, (x - buf["feat_mean"][:, None]) / buf["feat_std"][:, None], leaves)
        log_p = torch.log_softmax(logits, dim=-1)
        ce = -(targets * log_p).sum(-1)
        probs = torch.softmax(logits, dim=-1)
        expected = torch.stack([probs[g] @ buf["centers"][g] for g in range(len(which))])
        err = torch.stack([(expected[g] - lengths[g]) / buf["length_scale"][g] for g in range(len(which))])
        if censoring is not None:  # the censoring-aware loss of soft_label_loss
            index, censored = censoring
            tail = torch.arange(log_p.shape[-1])[None, None, :] >= index[:, :, None]
            censored_ce = -torch.logsumexp(log_p.masked_fill(~tail, float("-inf")), dim=-1)
            ce = torch.where(censored, censored_ce, ce)
            err = torch.where(censored, torch.relu(-err), err)
        return lam * ce.mean(-1) + (1 - lam) * (err ** 2).mean(-1), leaves

    def _logits(self, which: list[int], z: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        """The heads' layers on standardised features z [G, B, D], as ``SoftLabelHead.net`` computes them."""
        # a batch of one head would be a single product, which more threads may split: one thread for it
        n_threads = self.n_threads if len(which) > 1 else 1
        h = StackedLinear.apply(z, p["net.0.weight"], p["net.0.bias"], n_threads)
        if self.architecture == "official":
            h = torch.relu(torch.stack([F.layer_norm(h[g], h.shape[-1:], p["net.1.weight"][g], p["net.1.bias"][g])
                                        for g in range(len(which))]))
        else:
            h = F.gelu(h)
        h = h * self._dropout_masks(which, h.shape[1:])
        out = "net.4" if self.architecture == "official" else "net.3"
        return StackedLinear.apply(h, p[f"{out}.weight"], p[f"{out}.bias"], n_threads)

    def _dropout_masks(self, which: list[int], shape: torch.Size) -> torch.Tensor | float:
        """Each head's dropout noise from its own generator, drawn as ``torch.nn.functional.dropout`` draws it."""
        if self.dropout == 0:
            return 1.0
        keep = 1 - self.dropout
        return torch.stack([torch.empty(shape).bernoulli_(keep, generator=self.generators[m]) for m in which]
                           ).div_(keep)

    def step(self, which: list[int], leaves: dict[str, torch.Tensor]) -> None:
        """One AdamW step of heads ``which`` from the gradients on ``leaves``: torch's own AdamW (its multi-tensor
        form, which equals the one-tensor form bit for bit) over each head's slices, each with its own step count,
        so a head that sits out a minibatch (its epoch ended) does not count it."""
        full = len(which) == len(self.heads)
        slices: dict[str, list[torch.Tensor]] = {"params": [], "grads": [], "avg": [], "avg_sq": [], "steps": []}
        for g, m in enumerate(which):
            for name in self.names:
                slices["params"].append(self.params[name][m])
                slices["grads"].append(leaves[name].grad[m if full else g])
                slices["avg"].append(self.exp_avg[name][m])
                slices["avg_sq"].append(self.exp_avg_sq[name][m])
                slices["steps"].append(self.steps[m][name])
        with threads(self.n_threads):  # elementwise: the same result on any number of threads
            adamw(slices["params"], slices["grads"], slices["avg"], slices["avg_sq"], [], slices["steps"],
                  foreach=True, amsgrad=False, beta1=BETAS[0], beta2=BETAS[1], lr=self.lr,
                  weight_decay=self.weight_decay, eps=EPS, maximize=False)

