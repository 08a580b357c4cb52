"""Live speculative decoding with the OUTLETS drafter: draft a chain of k tokens, verify them in one target pass.

Every verify cycle starts from the newest committed token ``x[n]``, which the target has not read yet. The
drafter first reads the target states of the positions the last verify pass confirmed (its teacher-forced
block, fused low/mid/high layers with the next token, exactly as it is trained); its representation at ``n-1``
gives the remaining-length estimate of the cycle and the first draft ``d1``; ``k-1`` more steps feed it its own
representation and draft token. The target then reads ``[x[n], d1..dk]`` in one forward pass with its KV cache,
which yields its distributions ``p_0..p_k`` after each of them. Draft ``d_i`` is accepted with probability
``min(1, p_{i-1}(d_i) / q_i(d_i))``; at the first rejection the token is resampled from the residual
``max(0, p - q)`` (renormalised), and when all are accepted a bonus token is sampled from ``p_k``. At temperature 0
a draft is accepted when it equals the target's argmax and the correction is the argmax. Either way the output
has exactly the target's distribution (greedy decoding at T = 0). The target's cache is cropped to the accepted
tokens; the drafter keeps only its teacher-forced keys.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from lenscope.models.drafter import KV, Drafter, length_from_log
from lenscope.models.target import TargetModel


@dataclass
class Cycle:
    """One verify cycle from the newest token ``x[n]``: ``step`` = t, the tokens generated before ``x[n]`` (the
    decoding step of the length estimate, whose true remaining length is ``L - t`` for an answer of ``L`` tokens,
    as in training); ``drafts`` the proposed chain, of which ``accepted`` were accepted; ``tokens`` the tokens it
    committed (the accepted drafts, then the target's correction or bonus token; cut at a stop token or the
    budget); ``length`` the drafter's remaining-length estimate (its length head on its representation at
    ``n-1``), ``watched`` the target's state of the watched layer at ``n-1`` (for a probe), if asked for, and
    ``ends`` whether its last token is the answer's stop token."""

    step: int
    drafts: list[int]
    accepted: int
    tokens: list[int]
    length: float
    watched: torch.Tensor | None = None
    ends: bool = False

    @property
    def corrected(self) -> bool:
        """Whether the cycle's last token replaced a rejected draft (else it is the bonus token)."""
        return self.accepted < len(self.drafts)


@dataclass
class Decoded:
    """A finished generation: the generated ``tokens`` (a stop token included), whether it stopped by itself,
    the wall time of the decoding loop, and the verify cycles of a speculative run (none for plain decoding)."""

    tokens: list[int]
    finished: bool
    seconds: float
    cycles: list[Cycle] = field(default_factory=list)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token drawn from a probability vector."""
    return int(torch.multinomial(probs, 1, generator=generator))


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax at ``temperature`` (float32); at temperature 0 the one-hot argmax."""
    if temperature <= 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits.float() / temperature, dim=-1)


def verify(p: Sequence[torch.Tensor], q: torch.Tensor, drafts: Sequence[int], greedy: bool,
           generator: torch.Generator | None) -> tuple[int, int]:
    """The acceptance rule: target distributions ``p`` (k+1 rows of [V], read in order and only as far as
    needed), draft distributions ``q`` [k, V] (zero outside the draft vocabulary) and the drafted tokens. Returns
    (accepted drafts, next token): the residual resample at the first rejection, else the bonus token from
    ``p[k]``. ``greedy``: match against the target's argmax."""
    for i, token in enumerate(drafts):
        row = p[i]
        if greedy:
            if int(row.argmax()) != token:
                return i, int(row.argmax())
            continue
        ratio = row[token] / q[i, token]
        if ratio < 1 and float(torch.rand((), generator=generator)) >= ratio:
            residual = (row - q[i]).clamp_min(0)
            return i, sample(residual if residual.sum() > 0 else row, generator)
    last = p[len(drafts)]
    return len(drafts), int(last.argmax()) if greedy else sample(last, generator)


class TargetRows:
    """The target's next-token distributions at the rows of final states [T, d], each computed (LM head, softmax
    at ``temperature``) when first read: verification usually stops after the first few."""

    def __init__(self, target: TargetModel, final: torch.Tensor, temperature: float) -> None:
        self.target, self.final, self.temperature, self.rows = target, final, temperature, {}

    def __getitem__(self, i: int) -> torch.Tensor:
        if i not in self.rows:
            logits = self.target.next_token_logits(self.final[i].unsqueeze(0))[0]
            self.rows[i] = probabilities(logits, self.temperature)
        return self.rows[i]


class _Budget:
    """Generated tokens with the stopping rule of the collection engine: a stop token or ``limit`` tokens."""

    def __init__(self, stop_ids: set[int], limit: int) -> None:
        self.stop_ids, self.limit, self.tokens, self.finished = stop_ids, limit, [], False

    @property
    def done(self) -> bool:
        return self.finished or len(self.tokens) >= self.limit

    def add(self, tokens: Sequence[int]) -> list[int]:
        """Commit ``tokens`` up to a stop token or the limit; returns those committed."""
        kept = []
        for token in tokens:
            if self.done:
                break
            kept.append(token)
            self.tokens.append(token)
            self.finished = token in self.stop_ids
        return kept


def _forward(target: TargetModel, ids: Sequence[int], start: int, cache: DynamicCache,
             layers: Sequence[int]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """Target pass over ``ids`` at positions ``start..`` with the cache holding positions ``< start``: final
    states [T, d] (no LM head yet) and the states of ``layers``."""
    tokens = torch.tensor([list(ids)])
    positions = torch.arange(start, start + len(ids)).unsqueeze(0)
    final, hidden = target.decode(tokens, torch.ones(1, start + len(ids), dtype=torch.long), positions, layers,
                                  cache)
    return final[0], {layer: h[0] for layer, h in hidden.items()}


@torch.no_grad()
def plain_decode(target: TargetModel, prompt_ids: Sequence[int], max_new_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> Decoded:
    """Autoregressive decoding, one target pass per token with a KV cache (the speed reference)."""
    generator = torch.Generator(device=target.device).manual_seed(seed)
    started = time.perf_counter()
    cache, budget = DynamicCache(), _Budget(target.stop_ids, max_new_tokens)
    final, _ = _forward(target, prompt_ids, 0, cache, [])
    position = len(prompt_ids)
    while True:
        token = sample(TargetRows(target, final, temperature)[-1], generator)
        budget.add([token])
        if budget.done:
            return Decoded(budget.tokens, budget.finished, time.perf_counter() - started)
        final, _ = _forward(target, [token], position, cache, [])
        position += 1


class SpeculativeDecoder:
    """Chain speculative decoding of ``target`` with ``drafter`` proposing ``k`` tokens per verify cycle."""

    def __init__(self, target: TargetModel, drafter: Drafter, k: int = 5, watch_layer: int | None = None) -> None:
        if k < 1:
            raise ValueError(f"the drafting horizon k must be at least 1, got {k}")
        self.target, self.drafter, self.k = target, drafter.eval().to(target.device), k
        self.watch_layer = watch_layer
        self.layers = sorted({*drafter.config.fuse_layers, *([] if watch_layer is None else [watch_layer])})

    def _draft_block(self, hidden: dict[int, torch.Tensor], next_ids: Sequence[int], start: int,
                     past: KV | None) -> tuple[torch.Tensor, KV | None]:
        """The drafter's teacher-forced pass over confirmed positions ``start..`` (target states and the tokens
        after them); returns its representations [m, d] and its keys/values up to there."""
        m = len(next_ids)
        features = self.drafter.fuse_features([hidden[layer].unsqueeze(0) for layer in self.drafter.config.fuse_layers])
        mask = None
        if past is not None:
            mask = torch.ones(1, m, past[0].shape[2] + m, dtype=torch.bool, device=features.device)
            mask[0, :, past[0].shape[2]:] = torch.ones(m, m, dtype=torch.bool).tril()
        positions = torch.arange(start, start + m, device=features.device).unsqueeze(0)
        rep, kv = self.drafter.step(features, torch.tensor([list(next_ids)], device=features.device), positions,
                                    past, mask)
        return rep[0], kv

    def _draft_chain(self, rep: torch.Tensor, position: int, past: KV | None, temperature: float,
                     generator: torch.Generator) -> tuple[list[int], torch.Tensor]:
        """``k`` drafts from the representation at ``position``; returns them and their distributions [k, V]."""
        drafts, q = [], torch.zeros(self.k, self.drafter.config.vocab_size, device=rep.device)
        prev = rep.view(1, 1, -1)
        for i in range(self.k):
            if i > 0:
                mask = None if past is None else torch.ones(1, 1, past[0].shape[2] + 1, dtype=torch.bool,
                                                            device=rep.device)
                prev, past = self.drafter.step(prev, torch.tensor([[drafts[-1]]], device=rep.device),
                                               torch.tensor([[position + i]], device=rep.device), past, mask)
            probs = probabilities(self.drafter.draft_logits(prev[0, 0]), temperature)
            q[i, self.drafter.target_ids(torch.arange(len(probs), device=rep.device))] = probs
            drafts.append(int(self.drafter.target_ids(torch.tensor(sample(probs, generator)))))
        return drafts, q

    @torch.no_grad()
    def cycles(self, prompt_ids: Sequence[int], max_new_tokens: int, temperature: float = 0.0,
               seed: int = 0) -> Iterator[tuple[int | None, Cycle | None]]:
        """Generate live: first ``(first_token, None)`` (the target's own token after the prompt), then
        ``(None, cycle)`` for every verify cycle until a stop token or ``max_new_tokens`` tokens."""
        generator = torch.Generator(device=self.target.device).manual_seed(seed)
        prompt_len, cache = len(prompt_ids), DynamicCache()
        budget = _Budget(self.target.stop_ids, max_new_tokens)
        final, hidden = _forward(self.target, prompt_ids, 0, cache, self.layers)
        first = budget.add([sample(TargetRows(self.target, final, temperature)[-1], generator)])[0]
        yield first, None
        block_start, block_ids, past = 0, [*prompt_ids[1:], first], None
        while not budget.done:
            n = prompt_len + len(budget.tokens) - 1           # position of the newest token, not read by the target
            rep, past = self._draft_block(hidden, block_ids, block_start, past)
            last = rep[-1]
            length = float(length_from_log(self.drafter.predict_log_length(last.unsqueeze(0)))[0])
            watched = None if self.watch_layer is None else hidden[self.watch_layer][-1].float().cpu()
            drafts, q = self._draft_chain(last, n - 1, past, temperature, generator)
            final, verified = _forward(self.target, [budget.tokens[-1], *drafts], n, cache, self.layers)
            accepted, token = verify(TargetRows(self.target, final, temperature), q, drafts, temperature <= 0,
                                     generator)
            if accepted < len(drafts):  # keep x[n] and the accepted drafts
                cache.crop(accepted - len(drafts))
            step = len(budget.tokens) - 1
            committed = budget.add([*drafts[:accepted], token])
            hidden = {layer: h[:accepted + 1] for layer, h in verified.items()}
            block_start, block_ids = n, [*drafts[:accepted], token]
            yield None, Cycle(step, drafts, accepted, committed, length, watched, budget.finished)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> Decoded:
        """A whole speculative generation with its cycles and wall time."""
        started, tokens, cycles = time.perf_counter(), [], []
        for first, cycle in self.cycles(prompt_ids, max_new_tokens, temperature, seed):
            tokens += [first] if cycle is None else cycle.tokens
            cycles += [] if cycle is None else [cycle]
        finished = bool(tokens) and tokens[-1] in self.target.stop_ids
        return Decoded(tokens, finished, time.perf_counter() - started, cycles)
