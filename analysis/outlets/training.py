"""Joint training of the OUTLETS drafter (speculative KL + log-space length loss) and its evaluation.

Target distributions are truncated to the target's top-k tokens (renormalised) to keep memory small:
the KL is ``sum_{v in topk} p(v) (log p(v) - log q(v))`` with ``q`` the drafter's full softmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from analysis.outlets.probes import remaining_length_samples
from analysis.outlets.speculative import acceptance_counts, greedy_chain
from models.drafter import Drafter, length_from_log, log_length

LENGTH_WEIGHT = 0.1      # lambda of the OUTLETS objective
L2_WEIGHT = 1e-5         # gamma: L2 on the length MLP


@dataclass(frozen=True)
class Variant:
    """An OUTLETS training variant: loss weights and architecture switches."""

    name: str
    kl_weight: float = 1.0
    length_weight: float = LENGTH_WEIGHT
    detach_length: bool = False
    use_decoder: bool = True
    gated_attention: bool = True
    length_mode: str = "regression"

    def drafter_overrides(self) -> dict:
        return {"use_decoder": self.use_decoder, "gated_attention": self.gated_attention,
                "length_mode": self.length_mode}


VARIANTS = {v.name: v for v in (
    Variant("outlets"),
    Variant("lp-only", kl_weight=0.0),
    # SD-only: the backbone sees only the KL; its length head is fit on stop-gradient representations.
    Variant("sd-only", detach_length=True),
    Variant("no-decoder", use_decoder=False),
    Variant("classification", length_mode="classification"),
    Variant("no-gate", gated_attention=False),
)}


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown drafter variant {name!r}; choose one of {sorted(VARIANTS)}")
    return VARIANTS[name]


@dataclass
class DrafterExample:
    """One stored run prepared for the drafter: ``hidden`` the three fused layers [T, d] (fp16 to
    save memory), ``target_ids``/``target_logp`` [T, K] the target's top-k next-token log-probs."""

    run_id: int
    prompt_id: int
    split: str
    prompt_len: int
    output_length: int
    input_ids: torch.Tensor
    hidden: list[torch.Tensor]
    target_ids: torch.Tensor
    target_logp: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])

    def inputs(self) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Drafter inputs for positions 0..T-2: hidden states and the next token of each position."""
        return [h[:-1].float().unsqueeze(0) for h in self.hidden], self.input_ids[1:].unsqueeze(0)


def target_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k token ids and their (full-softmax) log-probabilities of target logits [T, V]."""
    top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
    return top.indices, top.values


def truncated_kl(draft_logits: torch.Tensor, target_ids: torch.Tensor, target_logp: torch.Tensor) -> torch.Tensor:
    """Mean KL(target || draft) over rows, the target restricted to its top-k and renormalised."""
    p_logp = torch.log_softmax(target_logp.float(), dim=-1)
    q_logp = torch.log_softmax(draft_logits, dim=-1).gather(-1, target_ids)
    return (p_logp.exp() * (p_logp - q_logp)).sum(-1).mean()


def pad_batch(examples: Sequence[DrafterExample]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Drafter inputs of several runs, right-padded to the longest: three [B, S, d] hidden tensors and
    next ids [B, S]. With causal attention a real position never sees the padding after it."""
    inputs = [ex.inputs() for ex in examples]
    s = max(ids.shape[1] for _, ids in inputs)
    hidden = [torch.cat([F.pad(h[i], (0, 0, 0, s - h[i].shape[1])) for h, _ in inputs]) for i in range(3)]
    next_ids = torch.cat([F.pad(ids, (0, s - ids.shape[1])) for _, ids in inputs])
    return hidden, next_ids


def batch_loss(drafter: Drafter, batch: Sequence[DrafterExample], variant: Variant, kl_positions: int,
               gen: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
    """The joint objective on a batch of runs: KL at up to ``kl_positions`` random positions of each
    run + lambda * the length loss at every answer step of every run + gamma * L2(length MLP)."""
    rep, _ = drafter(*pad_batch(batch))
    total = drafter.length_head.l2() * L2_WEIGHT
    parts: dict[str, float] = {}
    if variant.kl_weight > 0:
        rows, cols, ids, logp = [], [], [], []
        for b, ex in enumerate(batch):
            pos = torch.randperm(ex.length - 1, generator=gen)[:kl_positions]
            rows.append(torch.full_like(pos, b))
            cols.append(pos)
            ids.append(ex.target_ids[pos + 1])
            logp.append(ex.target_logp[pos + 1])
        kl = truncated_kl(drafter.draft_logits(rep[torch.cat(rows), torch.cat(cols)]), torch.cat(ids), torch.cat(logp))
        total = total + variant.kl_weight * kl
        parts["kl"] = kl.item()
    if variant.length_weight > 0:
        samples = [remaining_length_samples(ex.prompt_len, ex.output_length) for ex in batch]
        rows = torch.cat([torch.full((len(sm.positions),), b) for b, sm in enumerate(samples)])
        feats = rep[rows, torch.as_tensor(np.concatenate([sm.positions for sm in samples]))]
        if variant.detach_length:
            feats = feats.detach()
        z = log_length(torch.as_tensor(np.concatenate([sm.remaining for sm in samples])))
        length = drafter.length_head.loss(drafter.length_output(feats), z)
        total = total + variant.length_weight * length
        parts["length"] = length.item()
    parts["loss"] = total.item()
    return total, parts


def fit_statistics(drafter: Drafter, examples: Sequence[DrafterExample]) -> None:
    """Input standardisation (fused layers, every position) and length-target standardisation
    (z at every answer step) from the training runs."""
    drafter.fit_inputs([torch.cat([ex.hidden[i] for ex in examples]) for i in range(3)])
    drafter.length_head.fit_target(torch.cat([
        log_length(torch.as_tensor(remaining_length_samples(ex.prompt_len, ex.output_length).remaining))
        for ex in examples]))


def train_drafter(drafter: Drafter, examples: Sequence[DrafterExample], variant: Variant, epochs: int = 3,
                  lr: float = 1e-3, weight_decay: float = 0.02, warmup: int = 20, kl_positions: int = 64,
                  runs_per_step: int = 4, seed: int = 0, head_lr_scale: float = 3.0,
                  on_step: Callable[[int, int, dict[str, float]], None] | None = None) -> list[dict[str, float]]:
    """AdamW over shuffled batches of ``runs_per_step`` runs (so every step sees many different
    lengths), linear warmup, gradient clipping at 1.0, the length head at ``head_lr_scale`` times the
    backbone learning rate. Inputs and the length target are standardised with training statistics
    first. Returns the mean loss parts of each epoch."""
    if not examples:
        raise ValueError("no training runs for the drafter")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    fit_statistics(drafter, examples)
    head = list(drafter.length_head.parameters())
    backbone = [p for p in drafter.parameters() if p.requires_grad and all(p is not h for h in head)]
    opt = torch.optim.AdamW([{"params": backbone}, {"params": head, "lr": lr * head_lr_scale}],
                            lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(warmup, 1)))
    per_epoch = math.ceil(len(examples) / runs_per_step)
    total_steps, step, history = epochs * per_epoch, 0, []
    drafter.train()
    for _ in range(epochs):
        sums: dict[str, float] = {}
        order = torch.randperm(len(examples), generator=gen).tolist()
        for begin in range(0, len(order), runs_per_step):
            loss, parts = batch_loss(drafter, [examples[i] for i in order[begin:begin + runs_per_step]],
                                     variant, kl_positions, gen)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            for key, value in parts.items():
                sums[key] = sums.get(key, 0.0) + value
            if on_step:
                on_step(step, total_steps, parts)
        history.append({key: value / per_epoch for key, value in sums.items()})
    drafter.eval()
    return history


@torch.no_grad()
def predict_example(drafter: Drafter, ex: DrafterExample,
                    max_step: int | None = None) -> tuple[pd.DataFrame, torch.Tensor]:
    """Remaining-length predictions at steps 0..max_step (rows run_id, step, predicted, true, split)
    and the draft representations at those steps."""
    hidden, next_ids = ex.inputs()
    rep, _ = drafter(hidden, next_ids)
    samples = remaining_length_samples(ex.prompt_len, ex.output_length, max_step)
    feats = rep[0][torch.as_tensor(samples.positions)]
    predicted = length_from_log(drafter.predict_log_length(feats))
    frame = pd.DataFrame({"run_id": ex.run_id, "step": samples.steps, "predicted": predicted.numpy(),
                          "true": samples.remaining, "split": ex.split})
    return frame, feats


def example_acceptance(drafter: Drafter, ex: DrafterExample, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluated and accepted drafts per step over all answer positions of one run
    (see :mod:`analysis.outlets.speculative` for the stored-sequence protocol)."""
    starts = torch.arange(ex.prompt_len - 1, ex.length - 2)
    if len(starts) == 0:
        return torch.zeros(k, dtype=torch.long), torch.zeros(k, dtype=torch.long)
    hidden, next_ids = ex.inputs()
    drafts = drafter.draft([h[0] for h in hidden], next_ids[0], starts, k)
    greedy, derivable = greedy_chain(ex.input_ids, ex.target_ids[:, 0], starts, k)
    return acceptance_counts(drafts, greedy, derivable)
