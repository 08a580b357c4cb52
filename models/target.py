"""A target causal LM: chat-formatted prompts, one-pass features, and a recording generation loop."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from models.logits import LogitSummary, summarize_logits
from models.sources import ModelSource, resolve_source

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOP_K = 5


def looks_binary(text: str) -> bool:
    """True for text with NUL bytes or where over 10% of characters are non-whitespace controls."""
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r")
    return "\x00" in text or controls > 0.1 * len(text)


def pick_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@dataclass
class SequenceFeatures:
    """Features of every position of a token sequence, all from the target's forward passes.

    ``entropy[i]`` is the entropy of the next-token distribution computed at position ``i``
    (i.e. of P(x_{i+1} | x_{<=i})); ``hidden[layer][i]`` is the hidden state of token ``i`` after
    ``layer`` decoder layers (0 = embeddings; the last layer includes the final norm).
    """

    input_ids: torch.Tensor
    tokens: list[str]
    entropy: torch.Tensor
    topk_ids: torch.Tensor
    topk_probs: torch.Tensor
    hidden: dict[int, torch.Tensor]

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class Generation:
    """A generated answer with the features of prompt and answer tokens and the true length."""

    prompt_len: int
    features: SequenceFeatures
    text: str
    finished: bool
    settings: dict
    duration_s: float = 0.0
    output_ids: list[int] = field(default_factory=list)

    @property
    def output_length(self) -> int:
        """Number of generated tokens (the end-of-turn token included when it was produced)."""
        return len(self.output_ids)


@dataclass
class GenerationSettings:
    """Sampling settings of :meth:`TargetModel.generate`; part of the run cache key."""

    max_new_tokens: int = 512
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0

    def as_dict(self) -> dict:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed}


class TargetModel:
    """A loaded causal LM plus tokenizer, with feature extraction for length prediction."""

    def __init__(self, model: torch.nn.Module, tokenizer, source: ModelSource, dtype: str) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.source = source
        self.dtype = dtype
        self.config = model.config
        self.stop_ids = self._stop_ids()

    @classmethod
    def load(cls, spec: str | None = None, device: str = "auto", dtype: str = "float32") -> "TargetModel":
        """Load a model from the embedded default, a local path, or a hub id (errors say which failed)."""
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
        source = resolve_source(spec)
        kwargs = {"gguf_file": source.gguf_file} if source.gguf_file else {}
        try:
            tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(source.path, dtype=DTYPES[dtype], **kwargs)
        except Exception as exc:  # transformers raises many types for unusable checkpoints
            where = "the local checkpoint" if source.local else "the model hub (is this machine online?)"
            raise ValueError(f"could not load model {source.spec!r} from {where}: {exc}") from exc
        return cls(model.to(pick_device(device)), tokenizer, source, dtype)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def context_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 2048))

    @property
    def key(self) -> str:
        """Stable identity of the loaded weights for the cache."""
        ident = f"{self.source.spec}|{self.source.gguf_file}|{self.dtype}|{self.num_layers}|{self.hidden_size}"
        return hashlib.sha256(ident.encode()).hexdigest()[:32]

    def default_layers(self) -> list[int]:
        """EAGLE-3 style low / middle / high layers plus the final (normed) layer."""
        n = self.num_layers
        return sorted({min(2, n), n // 2, max(n - 3, 0), n})

    def _stop_ids(self) -> set[int]:
        ids: set[int] = set()
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return ids

    def chat_ids(self, prompt: str) -> list[int]:
        """Token ids of ``prompt`` as a user turn with the chat template (raw text if none)."""
        if not prompt or not prompt.strip():
            raise ValueError("the prompt is empty")
        if looks_binary(prompt):
            raise ValueError("the prompt looks like binary data (NUL or many control characters), not text")
        if self.tokenizer.chat_template:
            enc = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, return_dict=True
            )
            ids = list(enc["input_ids"])
        else:
            ids = self.tokenizer(prompt)["input_ids"]
        if len(ids) >= self.context_length:
            raise ValueError(
                f"the prompt has {len(ids)} tokens but the model's context holds {self.context_length}"
            )
        return ids

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Readable text of each token id."""
        return [self.tokenizer.decode([i]) for i in ids]

    def _forward(self, ids: torch.Tensor, layers: Sequence[int], past=None):
        out = self.model(input_ids=ids.unsqueeze(0).to(self.device), cache=past,
                         use_cache=True, output_hidden_states=True)
        hidden = {layer: out.hidden_states[layer][0].float().cpu() for layer in layers}
        return out.logits[0], hidden, out.cache

    def _check_layers(self, layers: Sequence[int] | None) -> list[int]:
        layers = list(layers) if layers is not None else self.default_layers()
        bad = [layer for layer in layers if not 0 <= layer <= self.num_layers]
        if bad:
            raise ValueError(f"layers {bad} are outside 0..{self.num_layers}")
        return layers

    @torch.no_grad()
    def sequence_features(self, ids: Sequence[int], layers: Sequence[int] | None = None) -> SequenceFeatures:
        """Entropy, top-k and hidden states of every position of ``ids`` in ONE forward pass."""
        layers = self._check_layers(layers)
        input_ids = torch.tensor(list(ids), dtype=torch.long)
        logits, hidden, _ = self._forward(input_ids, layers)
        summary = summarize_logits(logits, TOP_K)
        return self._features(input_ids, summary, hidden)

    def prompt_features(self, prompt: str, layers: Sequence[int] | None = None) -> SequenceFeatures:
        """Features of a chat-formatted prompt (one forward pass)."""
        return self.sequence_features(self.chat_ids(prompt), layers)

    def _features(self, input_ids: torch.Tensor, summary: LogitSummary, hidden: dict) -> SequenceFeatures:
        return SequenceFeatures(
            input_ids=input_ids, tokens=self.token_strings(input_ids.tolist()),
            entropy=summary.entropy.cpu(), topk_ids=summary.topk_ids.cpu(),
            topk_probs=summary.topk_probs.cpu(), hidden=hidden,
        )

    @torch.no_grad()
    def generate(
        self,
        prompt: str,
        settings: GenerationSettings | None = None,
        layers: Sequence[int] | None = None,
        on_token: Callable[[int, int], None] | None = None,
    ) -> Generation:
        """Sample an answer token by token (KV cache), recording entropy and hidden states at every
        position. The final token is also run through the model so that every position, prompt and
        answer, has features. ``on_token(step, max_steps)`` reports progress (and may raise to cancel).
        """
        settings = settings or GenerationSettings()
        layers = self._check_layers(layers)
        prompt_ids = self.chat_ids(prompt)
        budget = min(settings.max_new_tokens, self.context_length - len(prompt_ids) - 1)
        if budget < 1:
            raise ValueError("max_new_tokens must be at least 1 and the prompt must leave room to answer")
        gen = torch.Generator().manual_seed(settings.seed)
        start = time.perf_counter()
        chunk = torch.tensor(prompt_ids, dtype=torch.long)
        past, logits_rows, hidden_rows, output_ids = None, [], [], []
        finished = False
        while True:
            logits, hidden, past = self._forward(chunk, layers, past)
            logits_rows.append(logits.float().cpu())
            hidden_rows.append(hidden)
            if finished or len(output_ids) == budget:
                break
            next_id = self._sample(logits[-1].float().cpu(), settings, gen)
            output_ids.append(next_id)
            finished = next_id in self.stop_ids
            chunk = torch.tensor([next_id], dtype=torch.long)
            if on_token:
                on_token(len(output_ids), budget)
        all_logits = torch.cat(logits_rows)
        summary = summarize_logits(all_logits, TOP_K)
        hidden_all = {layer: torch.cat([h[layer] for h in hidden_rows]) for layer in layers}
        features = self._features(torch.tensor(prompt_ids + output_ids), summary, hidden_all)
        text = self.tokenizer.decode(output_ids, skip_special_tokens=True)
        return Generation(
            prompt_len=len(prompt_ids), features=features, text=text, finished=finished,
            settings=settings.as_dict(), duration_s=time.perf_counter() - start, output_ids=output_ids,
        )

    @staticmethod
    def _sample(logits: torch.Tensor, settings: GenerationSettings, gen: torch.Generator) -> int:
        if settings.temperature <= 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / settings.temperature, dim=-1)
        if settings.top_p < 1.0:
            sorted_p, order = probs.sort(descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < settings.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=gen))

    @torch.no_grad()
    def next_token_logits(self, final_hidden: torch.Tensor) -> torch.Tensor:
        """Target logits from final-layer hidden states (as stored), via the LM head."""
        head = self.model.get_output_embeddings()
        return head(final_hidden.to(self.device, head.weight.dtype)).float()
