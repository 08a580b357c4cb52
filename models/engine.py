"""Batched collection engine: many prompts sampled at once with a KV cache, features for every position.

Rows are left-padded; waiting prompts (sorted by length within windows of arrival order) are prefilled in
groups and merged into the running batch whenever enough rows have finished, so the batch stays busy and
no row keeps computing after it finished. Each row samples with its own ``torch.Generator`` seeded from its
settings, so an answer depends only on (prompt, settings), not on what else is in the batch. Features (entropy, top-k,
hidden states of the recorded layers) come from the decode itself (``features="decode"``: the final
token is fed once more so every position has them) or from one teacher-forced batched pass after the
row finished (``features="teacher"``); both use :meth:`TargetModel.decode`, the one definition.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from lenscope.models.kv_slots import GROWTH, MIN_COLUMNS, SlotCache
from lenscope.models.logits import LogitSummary, summarize_logits
from lenscope.models.numbers import POSITIVE_INT, SEED, Range, check_fields
from lenscope.models.target import (
    FORWARD_TOKENS,
    TOP_K,
    SequenceFeatures,
    TargetModel,
    group_by_length,
    left_pad,
    positions_from_mask,
)

SAMPLER_VERSION = "rowgen-2"
FEATURE_MODES = ("decode", "teacher", "none")
MAX_AUTO_BATCH = {"cpu": 64, "cuda": 256}
# Prompts are admitted in request order, sorted by length only within windows of this many batches, so a
# collection stopped part-way holds a representative sample of its (shuffled) requests.
ADMISSION_WINDOW = 4
# The values the sampler takes (checked by GenerationSettings, and by every flag and form that sets them):
# temperature 0 is greedy, and above 10 the distribution is as good as uniform noise; top-p keeps a non-empty nucleus.
GENERATION_RANGES = {
    "max_new_tokens": POSITIVE_INT,
    "temperature": Range(0, 10),
    "top_p": Range(0, 1, low_open=True),
    "seed": SEED,
}


@dataclass
class GenerationSettings:
    """Sampling settings of one request; with :data:`SAMPLER_VERSION` part of the run key. Values outside
    :data:`GENERATION_RANGES` (a NaN temperature, top-p above 1, ...) raise ValueError: no such run is ever sampled or
    stored."""

    max_new_tokens: int = 1024
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    system_prompt: str = "default"

    def __post_init__(self) -> None:
        check_fields(self, GENERATION_RANGES)
        if not isinstance(self.system_prompt, str):
            raise ValueError(f"system_prompt must be a text, not {self.system_prompt!r}")

    def as_dict(self) -> dict:
        """The settings as stored; ``system_prompt`` appears only when it is not the template's default."""
        out = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
               "top_p": self.top_p, "seed": self.seed, "sampler": SAMPLER_VERSION}
        return out if self.system_prompt == "default" else {**out, "system_prompt": self.system_prompt}


@dataclass
class Generation:
    """A generated answer with the features of prompt and answer tokens and the true length."""

    prompt_len: int
    features: SequenceFeatures | None
    text: str
    finished: bool
    settings: dict
    duration_s: float = 0.0
    output_ids: list[int] = field(default_factory=list)
    content_start: int = 0

    @property
    def output_length(self) -> int:
        """Number of generated tokens (the end-of-turn token included when it was produced)."""
        return len(self.output_ids)


@dataclass
class EngineStats:
    """Running totals of an engine run: answer tokens sampled, decode steps, elapsed seconds."""

    tokens: int = 0
    steps: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(time.perf_counter() - self.started, 1e-9)


@dataclass
class Row:
    """A request in flight: its sampled tokens, generator and the features gathered so far; ``position`` is the
    position of its last sampled token (the next one fed)."""

    index: int
    prompt_ids: list[int]
    settings: GenerationSettings
    budget: int
    generator: torch.Generator
    position: int
    started: float
    output_ids: list[int] = field(default_factory=list)
    done: bool = False
    parts: list[tuple[LogitSummary, dict[int, torch.Tensor]]] = field(default_factory=list)

    @property
    def context(self) -> int:
        """Tokens of its prompt and answer so far: what it attends to, and what a recompute prefills."""
        return len(self.prompt_ids) + len(self.output_ids)


def token_budget(target: TargetModel, prompt_len: int, max_new_tokens: int) -> int:
    """New tokens a prompt may get: ``max_new_tokens`` within the model's context (error if none)."""
    budget = min(max_new_tokens, target.context_length - prompt_len - 1)
    if budget < 1:
        raise ValueError("max_new_tokens must be at least 1 and the prompt must leave room to answer")
    return budget


def sorted_within_windows(lengths: Sequence[int], window: int) -> list[int]:
    """Indices in their order, sorted by length within consecutive windows of ``window`` (the engine's admission
    order; the drafter's low-padding batches)."""
    return [i for start in range(0, len(lengths), window)
            for i in sorted(range(start, min(start + window, len(lengths))), key=lambda j: lengths[j])]


def available_memory() -> int:
    """Bytes of host memory a new allocation can get: Linux's ``MemAvailable`` (free pages plus the page cache
    it can reclaim), else the free pages alone."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def row_bytes(target: TargetModel, max_len: int, n_layers: int) -> int:
    """Memory one row needs at ``max_len`` tokens: its KV cache with the slot cache's growth slack
    (see :meth:`SlotLayer.reserve`) plus its recorded features (float32 hidden states of ``n_layers`` layers)."""
    cfg = target.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    item = torch.finfo(target.model.dtype).bits // 8
    kv_per_token = 2 * target.num_layers * kv_heads * head_dim * item
    return kv_per_token * (max_len + max_len // GROWTH + MIN_COLUMNS) + 4 * n_layers * target.hidden_size * max_len


def auto_batch_size(target: TargetModel, max_len: int, n_layers: int, fraction: float = 0.25) -> int:
    """Rows whose :func:`row_bytes` fit ``fraction`` of free memory, capped at :data:`MAX_AUTO_BATCH` for the
    device type."""
    if target.device.type == "cuda":
        free = torch.cuda.mem_get_info(target.device)[0]
    else:
        free = available_memory()
    rows = int(free * fraction // row_bytes(target, max_len, n_layers))
    return max(1, min(rows, MAX_AUTO_BATCH.get(target.device.type, 64)))


class RunningBatch:
    """The running batch: rows, their left-padded attention mask ``[B, L]`` and the slot KV cache (made by
    :meth:`BatchedEngine.running_batch`)."""

    def __init__(self, num_layers: int, slots: int, trim_columns: int = 64) -> None:
        self.rows: list[Row] = []
        self.mask: torch.Tensor | None = None
        self.cache = SlotCache(num_layers, slots)
        self.trim_columns = trim_columns

    def merge(self, rows: list[Row], mask: torch.Tensor, prefilled: DynamicCache) -> None:
        """Append freshly prefilled rows; the shorter side is left-padded to the common cache length."""
        old = self.cache.length
        self.cache.add_rows(prefilled)
        width = self.cache.length
        pad_old = torch.zeros(len(self.rows), width - old, dtype=mask.dtype, device=mask.device)
        pad_new = torch.zeros(len(rows), width - mask.shape[1], dtype=mask.dtype, device=mask.device)
        parts = [torch.cat([pad_new, mask], dim=1)]
        if self.rows:
            parts.insert(0, torch.cat([pad_old, self.mask], dim=1))
        self.mask = torch.cat(parts)
        self.rows.extend(rows)

    def keep(self, keep: list[int]) -> None:
        """Keep only rows ``keep``; drop leading columns once enough are padding for every remaining row."""
        if len(keep) == len(self.rows):
            return
        order = self.cache.keep(keep)
        self.rows = [self.rows[i] for i in order]
        self.mask = self.mask[torch.tensor(order, dtype=torch.long, device=self.mask.device)]
        if not self.rows:
            self.cache.shift(-self.cache.length)
            self.mask = self.mask[:, :0]
            return
        first = int(self.mask.any(0).int().argmax())
        if first >= max(self.trim_columns, self.mask.shape[1] // 4):
            self.cache.shift(-first)
            self.mask = self.mask[:, first:]


class BatchedEngine:
    """Samples many requests at once on ``target`` and yields each finished :class:`Generation`.

    ``batch_size`` rows run at a time ("auto": from a memory budget); prompts are prefilled in groups
    of at most ``prefill_tokens`` padded tokens; new rows join when at least ``refill`` slots are free.
    """

    def __init__(self, target: TargetModel, layers: Sequence[int] | None = None, batch_size: int | str = "auto",
                 features: str = "decode", prefill_tokens: int = FORWARD_TOKENS, refill: int | None = None) -> None:
        if features not in FEATURE_MODES:
            raise ValueError(f"features must be one of {FEATURE_MODES}, not {features!r}")
        self.target = target
        self.layers = target.check_layers(layers) if features != "none" else []
        self.batch_size = batch_size
        self.features = features
        self.prefill_tokens = prefill_tokens
        self.refill = refill
        self.stats = EngineStats()

    def _resolve_batch_size(self, longest: int) -> int:
        if self.batch_size == "auto":
            return auto_batch_size(self.target, longest, len(self.layers))
        size = int(self.batch_size)
        if size < 1:
            raise ValueError("batch_size must be at least 1")
        return size

    @torch.no_grad()
    def run(self, prompts: Sequence[Sequence[int]], settings: Sequence[GenerationSettings],
            on_step: Callable[[EngineStats], None] | None = None) -> Iterator[tuple[int, Generation]]:
        """Generate an answer for each prompt (token ids) with its settings; yields ``(index, generation)``
        as rows finish (in no fixed order). ``on_step(stats)`` runs after every decode step and may raise
        to cancel."""
        if len(prompts) != len(settings):
            raise ValueError("one GenerationSettings per prompt is needed")
        budgets = [token_budget(self.target, len(p), s.max_new_tokens) for p, s in zip(prompts, settings)]
        if not prompts:
            return
        size = self._resolve_batch_size(max(len(p) + b for p, b in zip(prompts, budgets)))
        refill = self.refill or max(1, size // 4)
        waiting = sorted_within_windows([len(p) for p in prompts], window=ADMISSION_WINDOW * size)
        batch, teacher_queue = RunningBatch(self.target.num_layers, size), []
        self.stats = EngineStats()
        while waiting or batch.rows:
            free = size - len(batch.rows)
            if waiting and (free >= refill or not batch.rows):
                admitted, waiting = waiting[:free], waiting[free:]
                lengths = [len(prompts[i]) for i in admitted]
                for group in group_by_length(lengths, self.prefill_tokens, spread=1.25):
                    rows = [self._new_row(admitted[k], prompts[admitted[k]], settings[admitted[k]],
                                          budgets[admitted[k]]) for k in group]
                    batch.merge(rows, *self._prefill(rows))
            done = self._step(batch) if batch.rows else []
            self.stats.steps += 1
            for row in done:
                if self.features == "teacher":
                    teacher_queue.append(row)
                else:
                    yield row.index, self._finish(row, self._decode_features(row))
            if teacher_queue and (len(teacher_queue) >= size or not (waiting or batch.rows)):
                yield from self._teacher_features(teacher_queue)
                teacher_queue = []
            if on_step:
                on_step(self.stats)

    def _new_row(self, index: int, prompt: Sequence[int], settings: GenerationSettings, budget: int) -> Row:
        gen = torch.Generator(device=self.target.device).manual_seed(settings.seed)
        return Row(index=index, prompt_ids=list(prompt), settings=settings, budget=budget, generator=gen,
                   position=len(prompt), started=time.perf_counter())

    # Serving one request at a time (lenscope.analysis.scheduler.live_server): the caller decides, at every
    # iteration, which rows join, which decode and which are evicted.
    def new_row(self, index: int, prompt: Sequence[int], settings: GenerationSettings) -> Row:
        """A request not yet prefilled (ValueError when its prompt leaves no room to answer)."""
        return self._new_row(index, prompt, settings, token_budget(self.target, len(prompt), settings.max_new_tokens))

    def running_batch(self, size: int) -> RunningBatch:
        """An empty batch of at most ``size`` rows."""
        return RunningBatch(self.target.num_layers, size)

    def admit(self, batch: RunningBatch, rows: list[Row]) -> list[Row]:
        """Prefill ``rows`` in groups of similar length (an evicted row recomputes its prompt and the tokens it had
        generated), sample each one's next token and add the unfinished ones to ``batch``; returns the rows that
        this token finished. Only without features (``features="none"``)."""
        if self.features != "none":
            raise ValueError("serving requests one by one needs an engine without features (features='none')")
        lengths = [r.context for r in rows]
        finished = []
        for group in group_by_length(lengths, self.prefill_tokens, spread=1.25):
            part = [rows[k] for k in group]
            for k in group:
                rows[k].position = lengths[k]
            batch.merge(part, *self._prefill(part))
            finished += [r for r in part if r.done]
        self.evict(batch, finished)
        return finished

    def decode_step(self, batch: RunningBatch) -> list[Row]:
        """One token for every row of ``batch``; returns (and removes) the rows it finished."""
        return self._step(batch)

    def evict(self, batch: RunningBatch, rows: list[Row]) -> None:
        """Drop ``rows`` and their KV cache from ``batch`` (they keep their tokens and generator)."""
        if rows:
            batch.keep([k for k, r in enumerate(batch.rows) if not any(r is x for x in rows)])

    def _prefill(self, rows: list[Row]) -> tuple[torch.Tensor, DynamicCache]:
        """Run the rows' prompts and any tokens they already generated (left-padded) into a fresh cache; record
        prompt features, sample the next token."""
        ids, mask = left_pad([r.prompt_ids + r.output_ids for r in rows])
        cache = DynamicCache()
        final, hidden = self.target.decode(ids, mask, positions_from_mask(mask), self.layers, cache)
        logits = self.target.next_token_logits(final[:, -1])
        if self.features == "decode":
            summary = self.target.summarize(final[mask.to(final.device).bool()])
            for k, (row, part) in enumerate(zip(rows, self.target.split_summary(summary, [len(r.prompt_ids)
                                                                                          for r in rows]))):
                n = len(row.prompt_ids)
                row.parts.append((part, {layer: h[k, -n:].float().cpu() for layer, h in hidden.items()}))
        self._sample(rows, logits)
        return mask.to(self.target.device), cache

    def _step(self, batch: RunningBatch) -> list[Row]:
        """Feed every row its last token; record features; sample; return the rows that are complete."""
        rows = batch.rows
        ids = torch.tensor([[r.output_ids[-1]] for r in rows])
        positions = torch.tensor([[r.position] for r in rows])
        batch.mask = torch.cat([batch.mask, batch.mask.new_ones(len(rows), 1)], dim=1)
        final, hidden = self.target.decode(ids, batch.mask, positions, self.layers, batch.cache)
        logits = self.target.next_token_logits(final[:, -1])
        if self.features == "decode":
            summary = summarize_logits(logits, TOP_K)
            entropy, top_ids, top_p = (summary.entropy.cpu(), summary.topk_ids.cpu(), summary.topk_probs.cpu())
            states = {layer: h[:, -1].float().cpu() for layer, h in hidden.items()}
            for k, row in enumerate(rows):
                row.parts.append((LogitSummary(entropy[k:k + 1], top_ids[k:k + 1], top_p[k:k + 1]),
                                  {layer: s[k:k + 1] for layer, s in states.items()}))
        for row in rows:
            row.position += 1
        complete = [r.done for r in rows]
        self._sample([r for r, c in zip(rows, complete) if not c],
                     logits[[k for k, c in enumerate(complete) if not c]])
        if self.features != "decode":  # no final feed needed: rows are complete once they stop sampling
            complete = [r.done for r in rows]
        batch.keep([k for k, c in enumerate(complete) if not c])
        return [r for r, c in zip(rows, complete) if c]

    def _sample(self, rows: list[Row], logits: torch.Tensor) -> None:
        """Append one token to each row: inverse-CDF sampling with one uniform from the row's own generator
        (greedy at temperature 0), batched over rows."""
        if not rows:
            return
        temps = torch.tensor([max(r.settings.temperature, 1e-6) for r in rows], device=logits.device)
        probs = torch.softmax(logits / temps[:, None], dim=-1)
        for k, row in enumerate(rows):
            if row.settings.top_p < 1.0:
                probs[k] = _nucleus(probs[k], row.settings.top_p)
        uniforms = torch.stack([torch.rand((), generator=r.generator, device=logits.device) for r in rows])
        tokens = _inverse_cdf(probs, uniforms).tolist()
        greedy = logits.argmax(-1).tolist()
        for k, row in enumerate(rows):
            token = greedy[k] if row.settings.temperature <= 0 else tokens[k]
            row.output_ids.append(token)
            self.stats.tokens += 1
            row.done = token in self.target.stop_ids or len(row.output_ids) >= row.budget

    def _finish(self, row: Row, features: SequenceFeatures | None) -> Generation:
        text = self.target.tokenizer.decode(row.output_ids, skip_special_tokens=True)
        return Generation(prompt_len=len(row.prompt_ids), features=features, text=text,
                          finished=row.output_ids[-1] in self.target.stop_ids, settings=row.settings.as_dict(),
                          duration_s=time.perf_counter() - row.started, output_ids=row.output_ids,
                          content_start=self.target.content_start(row.prompt_ids, row.settings.system_prompt))

    def _decode_features(self, row: Row) -> SequenceFeatures | None:
        if self.features == "none":
            return None
        summaries, states = zip(*row.parts)
        summary = LogitSummary(*(torch.cat([getattr(s, f) for s in summaries])
                                 for f in ("entropy", "topk_ids", "topk_probs")))
        hidden = {layer: torch.cat([s[layer] for s in states]) for layer in self.layers}
        return self.target.make_features(row.prompt_ids + row.output_ids, summary, hidden)

    def _teacher_features(self, rows: list[Row]) -> Iterator[tuple[int, Generation]]:
        feats = self.target.features([r.prompt_ids + r.output_ids for r in rows], self.layers,
                                     max_tokens=self.prefill_tokens)
        for row, f in zip(rows, feats):
            yield row.index, self._finish(row, f)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` restricted to the smallest set of most likely tokens holding ``top_p`` of the mass."""
    sorted_p, order = probs.sort(descending=True)
    keep = sorted_p.cumsum(0) - sorted_p < top_p
    return torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])


def _inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row, the first token whose cumulative probability exceeds ``uniform`` x total mass (a token of
    zero probability is never drawn)."""
    cdf = probs.cumsum(-1)
    return torch.searchsorted(cdf, uniforms[:, None] * cdf[:, -1:], right=True).squeeze(1).clamp(
        max=probs.shape[-1] - 1)


def generate(target: TargetModel, prompt: str, settings: GenerationSettings | None = None,
             layers: Sequence[int] | None = None,
             on_progress: Callable[[int, int, str], None] | None = None) -> Generation:
    """One chat prompt through the engine (batch of one, features from the decode), streaming
    ``on_progress(tokens, budget, "tokens")`` after each decode step (it may raise to cancel)."""
    settings = settings or GenerationSettings()
    ids = target.chat_ids(prompt, settings.system_prompt)
    budget = token_budget(target, len(ids), settings.max_new_tokens)
    engine = BatchedEngine(target, layers, batch_size=1)
    step = (lambda stats: on_progress(min(stats.tokens, budget), budget, "tokens")) if on_progress else None
    (_, generation), = list(engine.run([ids], [settings], on_step=step))
    return generation
