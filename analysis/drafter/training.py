"""Joint training of the OUTLETS drafter (speculative KL + log-space length loss) and its evaluation.

Target distributions are truncated to the target's top-k tokens (renormalised) to keep memory small:
the KL is ``sum_{v in topk} p(v) (log p(v) - log q(v))`` with ``q`` the drafter's softmax over its draft
vocabulary. The KL is taken over ``ttt_steps`` unrolled drafting steps (EAGLE-3's training-time test, see
:func:`ttt_kl`), so the drafter is trained on its own representations as it drafts ahead at inference.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from lenscope.analysis.drafter.probes import remaining_length_samples
from lenscope.models.drafter import KV, Drafter, length_from_log, log_length
from lenscope.models.engine import sorted_within_windows

LENGTH_WEIGHT = 0.1      # lambda of the OUTLETS objective
L2_WEIGHT = 1e-5         # gamma: L2 on the length MLP
TTT_DECAY = 0.8          # weight decay**i of drafting step i in the training-time test (EAGLE-3)
# Drafting steps unrolled in training: EAGLE-3's 7 on a GPU; 3 on a CPU, where each step adds a decoder pass.
TTT_STEPS = {"cuda": 7, "cpu": 3}
DRAFT_VOCAB_SIZE = 4096  # reduced draft vocabulary (EAGLE-3 style): the LM head is most of a drafter step on a CPU
# Runs are shuffled, then sorted by length within windows of this many before being cut into batches: a batch of
# 4 random study runs pads to 1.96x its real tokens, one of a sorted window of 64 to 1.13x (padding is computed
# and masked, never scored). 0: random batches.
LENGTH_WINDOW = 64


def default_ttt_steps(device_type: str) -> int:
    """Training-time-test steps by default on a device type (``cuda``, ``cpu``, ...): 7 on a GPU, else 3."""
    return TTT_STEPS.get(device_type, TTT_STEPS["cpu"])


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


def truncated_kl(draft_logits: torch.Tensor, target_ids: torch.Tensor, target_logp: torch.Tensor,
                 draft_index: torch.Tensor | None = None) -> torch.Tensor:
    """Mean KL(target || draft) over rows, the target restricted to its top-k and renormalised. With a reduced
    draft vocabulary, ``draft_index`` maps target ids to draft indices (-1: not drafted); the target is then
    restricted to its drafted top-k tokens too, and rows with none are left out (as EAGLE-3 masks them)."""
    index = target_ids if draft_index is None else draft_index[target_ids]
    drafted = index >= 0
    keep = drafted.any(-1)
    if not keep.any():
        return draft_logits.sum() * 0.0
    index, drafted = index[keep], drafted[keep]
    p_logp = torch.log_softmax(target_logp[keep].float().masked_fill(~drafted, float("-inf")), dim=-1)
    q_logp = torch.log_softmax(draft_logits[keep], dim=-1).gather(-1, index.clamp_min(0))
    terms = torch.where(drafted, p_logp.exp() * (p_logp - q_logp), torch.zeros_like(q_logp))
    return terms.sum(-1).mean()


def pad_batch(examples: Sequence[DrafterExample]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Drafter inputs of several runs, right-padded to the longest: three [B, S, d] hidden tensors and
    next ids [B, S]. With causal attention a real position never sees the padding after it."""
    inputs = [ex.inputs() for ex in examples]
    s = max(ids.shape[1] for _, ids in inputs)
    hidden = [torch.cat([F.pad(h[i], (0, 0, 0, s - h[i].shape[1])) for h, _ in inputs]) for i in range(3)]
    next_ids = torch.cat([F.pad(ids, (0, s - ids.shape[1])) for _, ids in inputs])
    return hidden, next_ids


def draft_positions(batch: Sequence[DrafterExample], per_run: int,
                    gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to ``per_run`` random start positions of each run (``[B, R]``, padded with 0) and how many drafting
    steps each can be scored on (``[B, R]``, 0 for padding): from ``p`` step ``i`` predicts ``x[p+2+i]``."""
    picks = [torch.randperm(ex.length - 1, generator=gen)[:per_run] for ex in batch]
    width = max(len(p) for p in picks)
    starts = torch.zeros(len(batch), width, dtype=torch.long)
    steps = torch.zeros(len(batch), width, dtype=torch.long)
    for b, (ex, pos) in enumerate(zip(batch, picks)):
        starts[b, :len(pos)] = pos
        steps[b, :len(pos)] = ex.length - 1 - pos
    return starts, steps


def ttt_kl(drafter: Drafter, rep: torch.Tensor, kv: KV | None, batch: Sequence[DrafterExample], next_ids: torch.Tensor,
           starts: torch.Tensor, steps: torch.Tensor, ttt_steps: int, decay: float) -> torch.Tensor:
    """Training-time test (EAGLE-3): the KL of ``ttt_steps`` unrolled drafting steps from every start, weighted
    ``decay**i`` (normalised, so the KL keeps the scale the joint loss weights assume).

    Step 0 reads the teacher-forced representation at ``p``; step ``i`` feeds the drafter its own representation
    of step ``i-1`` with the stored next token ``x[p+1+i]`` (the shifted target tokens, as EAGLE-3 does) at
    position ``p+i``, attending to the teacher-forced keys ``<= p`` and to its own keys of steps ``1..i`` at the
    same start (not to other starts'). Only the starts are unrolled, so extra steps cost little."""
    device = rep.device
    starts, steps = starts.to(device), steps.to(device)
    b, r = starts.shape
    rows = torch.arange(b, device=device).unsqueeze(1).expand(b, r)
    prev = rep[rows, starts]                                                                     # [B, R, d]
    visible = torch.arange(rep.shape[1], device=device).view(1, 1, -1) <= starts.unsqueeze(-1)   # [B, R, S]
    target_ids = torch.stack([F.pad(ex.target_ids, (0, 0, 0, next_ids.shape[1] + 1 - ex.length))
                              for ex in batch]).to(device)
    target_logp = torch.stack([F.pad(ex.target_logp.float(), (0, 0, 0, next_ids.shape[1] + 1 - ex.length))
                               for ex in batch]).to(device)
    index = None if drafter.config.draft_vocab_size == 0 else drafter.draft_index
    past, total, weights = kv, rep.new_zeros(()), 0.0
    for i in range(ttt_steps):
        if i > 0:
            mask = None
            if past is not None:  # teacher-forced keys <= p, then this start's own keys of steps 1..i
                mask = torch.cat([visible, torch.eye(r, dtype=torch.bool, device=device).repeat(b, 1, i)], -1)
            tokens = next_ids[rows, (starts + i).clamp(max=next_ids.shape[1] - 1)]
            prev, past = drafter.step(prev, tokens, starts + i, past, mask)
        live = steps > i
        if not live.any():
            break
        at = (starts + 1 + i)[live]
        kl = truncated_kl(drafter.draft_logits(prev[live]), target_ids[rows[live], at],
                          target_logp[rows[live], at], index)
        total, weights = total + decay ** i * kl, weights + decay ** i
    return total / weights


def batch_loss(drafter: Drafter, batch: Sequence[DrafterExample], variant: Variant, kl_positions: int,
               gen: torch.Generator, ttt_steps: int = 1,
               decay: float = TTT_DECAY) -> tuple[torch.Tensor, dict[str, float]]:
    """The joint objective on a batch of runs: the KL of ``ttt_steps`` drafting steps (training-time test, see
    :func:`ttt_kl`) from up to ``kl_positions`` random starts of each run + lambda * the length loss at every
    answer step of every run (on the teacher-forced representation the live decoder reads at each verify cycle)
    + gamma * L2(length MLP). Runs on the drafter's device."""
    device = drafter.embed_weight.device
    hidden, next_ids = pad_batch(batch)
    next_ids = next_ids.to(device)
    rep, kv = drafter([h.to(device) for h in hidden], next_ids)
    total = drafter.length_head.l2() * L2_WEIGHT
    parts: dict[str, float] = {}
    if variant.kl_weight > 0:
        starts, steps = draft_positions(batch, kl_positions, gen)
        kl = ttt_kl(drafter, rep, kv, batch, next_ids, starts, steps, ttt_steps, decay)
        total = total + variant.kl_weight * kl
        parts["kl"] = kl.item()
    if variant.length_weight > 0:
        samples = [remaining_length_samples(ex.prompt_len, ex.output_length) for ex in batch]
        rows = torch.cat([torch.full((len(sm.positions),), b) for b, sm in enumerate(samples)]).to(device)
        feats = rep[rows, torch.as_tensor(np.concatenate([sm.positions for sm in samples]), device=device)]
        if variant.detach_length:
            feats = feats.detach()
        z = log_length(torch.as_tensor(np.concatenate([sm.remaining for sm in samples]), device=device))
        length = drafter.length_head.loss(drafter.length_output(feats), z)
        total = total + variant.length_weight * length
        parts["length"] = length.item()
    parts["loss"] = total.item()
    return total, parts


def draft_vocabulary(examples: Sequence[DrafterExample], size: int, vocab_size: int) -> torch.Tensor:
    """The ``size`` target tokens of highest expected frequency at the answer positions of ``examples`` (the
    sum of the target's top-k probabilities of each token), sorted: the reduced draft vocabulary."""
    mass = torch.zeros(vocab_size)
    for ex in examples:
        start = max(ex.prompt_len - 1, 0)
        mass.index_add_(0, ex.target_ids[start:].reshape(-1), ex.target_logp[start:].float().exp().reshape(-1))
    return mass.topk(size).indices.sort().values


def fit_statistics(drafter: Drafter, examples: Sequence[DrafterExample]) -> None:
    """Input standardisation (fused layers, every position), length-target standardisation (z at every answer
    step) and, for a reduced draft vocabulary, its tokens, all from the training runs."""
    drafter.fit_inputs([torch.cat([ex.hidden[i] for ex in examples]) for i in range(3)])
    if drafter.config.draft_vocab_size:
        drafter.set_draft_vocab(draft_vocabulary(examples, drafter.config.draft_vocab_size, drafter.config.vocab_size))
    drafter.length_head.fit_target(torch.cat([
        log_length(torch.as_tensor(remaining_length_samples(ex.prompt_len, ex.output_length).remaining))
        for ex in examples]))


def bf16_native(device: torch.device | str) -> bool:
    """Whether ``device`` multiplies bfloat16 natively: CUDA, or a CPU whose flags list AVX-512 BF16 or AMX
    (:func:`cpu_flags`). oneDNN's own test accepts any AVX-512 CPU, where bfloat16 is emulated: on a 2-core Xeon
    without either, a drafter-sized linear layer ran 2.6x slower in bfloat16 autocast than in float32."""
    device = torch.device(device)
    return device.type == "cuda" or (device.type == "cpu" and bool({"avx512_bf16", "amx_bf16"} & cpu_flags()))


@functools.cache
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The instruction-set flags the CPU reports (Linux's ``cpuinfo``; empty where there is none, read as no
    bfloat16 hardware)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return frozenset()
    return frozenset(re.findall(r"[a-z0-9_]+", next((line.split(":", 1)[1] for line in text.splitlines()
                                                     if line.startswith("flags")), "")))


@contextlib.contextmanager
def mixed_precision(device: torch.device | str, enabled: bool) -> Iterator[None]:
    """bfloat16 autocast of the forward pass where the device has it natively (weights, optimiser and gradients
    stay float32), else nothing. On the study's drafter (2 CPU cores) a step took 0.55 s against 0.84 s in
    float32, with the same losses within 1e-3 after 4 epochs."""
    device = torch.device(device)
    if not (enabled and bf16_native(device)):
        yield
        return
    with torch.autocast(device.type, dtype=torch.bfloat16), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Mismatch dtype between input and weight")  # RMSNorm's unfused path
        yield


def epoch_batches(lengths: Sequence[int], size: int, window: int, gen: torch.Generator) -> list[list[int]]:
    """One epoch's batches of ``size`` indices: a random order, sorted by length within windows of ``window``
    (0: not sorted), cut into batches, the batches shuffled. Runs of a batch have similar lengths, so little of
    it is padding, and every window is a random draw of the whole set."""
    order = torch.randperm(len(lengths), generator=gen).tolist()
    if window <= 1:
        return [order[k:k + size] for k in range(0, len(order), size)]
    order = [order[i] for i in sorted_within_windows([lengths[j] for j in order], window)]
    batches = [order[k:k + size] for k in range(0, len(order), size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def train_drafter(drafter: Drafter, examples: Sequence[DrafterExample], variant: Variant, epochs: int = 3,
                  lr: float = 1e-3, weight_decay: float = 0.02, warmup: int = 20, kl_positions: int = 64,
                  runs_per_step: int = 4, seed: int = 0, head_lr_scale: float = 3.0, ttt_steps: int = 1,
                  device: torch.device | str = "cpu", length_window: int = LENGTH_WINDOW, bf16: bool = True,
                  on_step: Callable[[int, int, dict[str, float]], None] | None = None) -> list[dict[str, float]]:
    """AdamW over batches of ``runs_per_step`` runs of similar length in shuffled order (:func:`epoch_batches`
    with ``length_window``), linear warmup, gradient clipping at 1.0, the length head at ``head_lr_scale`` times
    the backbone learning rate, the KL over ``ttt_steps`` unrolled drafting steps (1: teacher forcing only), on
    ``device`` (the drafter stays there), its forward in bfloat16 autocast with ``bf16`` where the device has it
    (:func:`mixed_precision`). Inputs and the length target are standardised with training statistics first.
    Returns the mean loss parts of each epoch."""
    if ttt_steps < 1:
        raise ValueError(f"ttt_steps must be at least 1, got {ttt_steps}")
    if not examples:
        raise ValueError("no training runs for the drafter")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    fit_statistics(drafter, examples)
    drafter.to(device)
    head = list(drafter.length_head.parameters())
    backbone = [p for p in drafter.parameters() if p.requires_grad and all(p is not h for h in head)]
    opt = torch.optim.AdamW([{"params": backbone}, {"params": head, "lr": lr * head_lr_scale}],
                            lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(warmup, 1)))
    per_epoch = math.ceil(len(examples) / runs_per_step)  # also with length windows: only the last batch is short
    total_steps, step, history = epochs * per_epoch, 0, []
    drafter.train()
    for _ in range(epochs):
        sums: dict[str, float] = {}
        for batch in epoch_batches([ex.length for ex in examples], runs_per_step, length_window, gen):
            with mixed_precision(device, bf16):
                loss, parts = batch_loss(drafter, [examples[i] for i in batch], variant, kl_positions, gen,
                                         ttt_steps)
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
    device = drafter.embed_weight.device
    hidden, next_ids = ex.inputs()
    rep, _ = drafter([h.to(device) for h in hidden], next_ids.to(device))
    samples = remaining_length_samples(ex.prompt_len, ex.output_length, max_step)
    feats = rep[0][torch.as_tensor(samples.positions, device=device)]
    predicted = length_from_log(drafter.predict_log_length(feats)).cpu()
    frame = pd.DataFrame({"run_id": ex.run_id, "step": samples.steps, "predicted": predicted.numpy(),
                          "true": samples.remaining, "split": ex.split})
    return frame, feats.cpu()
