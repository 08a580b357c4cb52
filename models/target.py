"""A target causal LM: chat-formatted prompts and the one definition of per-position features.

Features of a position (next-token entropy over the full vocabulary in nats, top-k candidates, hidden
states of the recorded layers) come from :meth:`TargetModel.decode`, which both the batched engine
(``models/engine.py``) and teacher-forced passes (:meth:`TargetModel.features`) use.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lenscope.models.gguf_checkpoint import find_converted, load_converted, save_converted
from lenscope.models.logits import LogitSummary, summarize_logits
from lenscope.models.sources import LOCAL_LOAD_OPTIONS, ModelSource, load_options, resolve_source

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOP_K = 5
END_OF_TURN_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>")
# Positions whose logits are computed at once (bounds the transient [positions, vocab] logits).
LOGIT_CHUNK_ELEMENTS = 1 << 25
# Rows of those logits summarised at once: softmax, entropy and top-k over 32 rows (6 MB) stay in the cache and
# ran at 85 us a row against 234 us over a whole chunk (2 CPU cores); each row's arithmetic is the same.
SUMMARY_ROWS = 32
# Padded tokens per teacher-forced forward (bounds the transient hidden states of all layers).
FORWARD_TOKENS = 4096


def looks_binary(text: str) -> bool:
    """True for text with NUL bytes or where over 10% of characters are non-whitespace controls."""
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r")
    return "\x00" in text or controls > 0.1 * len(text)


def lone_surrogate(text: str, what: str = "the prompt") -> str | None:
    """Why ``text`` is not valid Unicode text (``the prompt holds a lone surrogate (U+D800) at character 0: ...``,
    ``what`` naming it), or None: a JSON ``\\ud800`` escape decodes to half of a UTF-16 pair, which no tokenizer,
    hash or database can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"{what} holds a lone surrogate (U+{ord(text[exc.start]):04X}) at character {exc.start:,}: not "
                "valid Unicode text")
    return None


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[B, W]`` left-padded to the longest sequence, and the attention mask (1 = real token)."""
    width = max(len(s) for s in sequences)
    ids = torch.tensor([[pad_id] * (width - len(s)) + list(s) for s in sequences], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], dtype=torch.long)
    return ids, mask


def group_by_length(lengths: Sequence[int], max_tokens: int, spread: float | None = None) -> list[list[int]]:
    """Indices sorted by length in groups of at most ``max_tokens`` padded tokens; with ``spread`` a group's
    longest sequence is also at most ``spread`` times (+16 tokens) its shortest, to limit padding."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda j: lengths[j]):
        group = groups[-1] if groups else None
        if (group is None or (len(group) + 1) * lengths[i] > max_tokens
                or (spread is not None and lengths[i] > spread * lengths[group[0]] + 16)):
            groups.append([i])
        else:
            group.append(i)
    return groups


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows (padding gets position 0)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def pick_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def device_name(device: torch.device) -> str:
    """The GPU's name, else the CPU's model name with torch's thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                 platform.processor() or platform.machine())
    threads = torch.get_num_threads()
    return f"{model} ({threads} thread{'s' if threads != 1 else ''})"


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

    def with_top_k(self, k: int) -> SequenceFeatures:
        """The same features with only the ``k`` most likely next tokens of each position."""
        return replace(self, topk_ids=self.topk_ids[:, :k], topk_probs=self.topk_probs[:, :k])


class TargetModel:
    """A loaded causal LM plus tokenizer, with feature extraction for length prediction."""

    def __init__(self, model: torch.nn.Module, tokenizer, source: ModelSource, dtype: str) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.source = source
        self.dtype = dtype
        self.config = model.config
        self.stop_ids = self._stop_ids()
        self._prefixes: dict[str, list[int]] = {}

    @classmethod
    def load(cls, spec: str | ModelSource | None = None, device: str = "auto", dtype: str = "float32") -> TargetModel:
        """Load a model from the embedded default, a local path, or a hub id (errors say which failed); a
        :class:`ModelSource` is loaded as it is, without resolving a spec."""
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
        source = spec if isinstance(spec, ModelSource) else resolve_source(spec)
        kwargs = load_options(source)  # never a model's own code; custom code is refused here, before any load
        gguf = Path(source.path) / source.gguf_file if source.gguf_file and source.local else None
        if gguf is not None and gguf.is_file():
            loaded = load_converted(gguf, DTYPES[dtype])  # the GGUF's plain copy: no metadata parsing
            if loaded is not None:
                return cls(loaded[0].to(pick_device(device)), loaded[1], source, dtype)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source.path, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(source.path, dtype=DTYPES[dtype], **kwargs)
        except Exception as exc:  # transformers raises many types for unusable checkpoints
            detail = " ".join(str(exc).split())  # one line: transformers' messages run over several
            if "trust_remote_code" in detail:  # a hub model that needs its own code (transformers refused it)
                raise ValueError(f"model {source.spec!r} declares custom code (auto_map); lenscope never runs a "
                                 "model's own code") from exc
            where = "the local checkpoint" if source.local else "the model hub (is this machine online?)"
            raise ValueError(f"could not load model {source.spec!r} from {where}: {detail}") from exc
        if gguf is not None and dtype == "float32":
            save_converted(model, tokenizer, gguf)
        return cls(model.to(pick_device(device)), tokenizer, source, dtype)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def nbytes(self) -> int:
        """Memory held by the weights and buffers."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        """Token ids the model takes: ``0 .. vocab_size - 1`` (rows of its embedding and of its LM head)."""
        return int(self.config.vocab_size)

    @property
    def context_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 2048))

    @property
    def key(self) -> str:
        """Stable identity of the loaded weights (part of every run key)."""
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
        for token in END_OF_TURN_TOKENS:
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                ids.add(token_id)
        return ids

    def chat_ids(self, prompt: str, system_prompt: str = "default") -> list[int]:
        """Token ids of ``prompt`` as a user turn with the chat template (raw text if none). ``system_prompt``:
        ``default`` (whatever the template puts there), ``none`` (an empty system turn) or a text."""
        if not prompt or not prompt.strip():
            raise ValueError("the prompt is empty")
        if looks_binary(prompt):
            raise ValueError("the prompt looks like binary data (NUL or many control characters), not text")
        invalid = lone_surrogate(prompt)
        if invalid:
            raise ValueError(invalid)
        ids = self._template_ids(prompt, system_prompt)
        if len(ids) >= self.context_length:
            raise ValueError(
                f"the prompt has {len(ids)} tokens but the model's context holds {self.context_length}"
            )
        return ids

    def _template_ids(self, prompt: str, system_prompt: str) -> list[int]:
        if not self.tokenizer.chat_template:
            if system_prompt != "default":
                raise ValueError(f"{self.source.spec} has no chat template, so it takes no system prompt")
            return list(self.tokenizer(prompt)["input_ids"])
        system = [] if system_prompt == "default" else [
            {"role": "system", "content": "" if system_prompt == "none" else system_prompt}]
        enc = self.tokenizer.apply_chat_template(system + [{"role": "user", "content": prompt}],
                                                 add_generation_prompt=True, return_dict=True)
        return list(enc["input_ids"])

    def template_prefix(self, system_prompt: str = "default") -> list[int]:
        """The ids every prompt starts with under the template (system turn and user header, or BOS): the
        longest common prefix of two one-token prompts."""
        if system_prompt not in self._prefixes:
            a, b = self._template_ids("a", system_prompt), self._template_ids("b", system_prompt)
            n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            self._prefixes[system_prompt] = a[:n]
        return self._prefixes[system_prompt]

    def content_start(self, prompt_ids: Sequence[int], system_prompt: str = "default") -> int:
        """Position of the first token of the user's content in ``prompt_ids`` (0 when they do not start
        with the template's prefix): pooling over a prompt starts here, never on the fixed template."""
        prefix = self.template_prefix(system_prompt)
        return len(prefix) if list(prompt_ids[:len(prefix)]) == prefix else 0

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Readable text of each token id."""
        return [self.tokenizer.decode([i]) for i in ids]


    @property
    def decoder(self) -> torch.nn.Module:
        """The decoder stack without the LM head (``model.model`` for HF causal LMs)."""
        return getattr(self.model, "model", None) or self.model.get_decoder()

    def check_layers(self, layers: Sequence[int] | None) -> list[int]:
        """``layers`` (default :meth:`default_layers`) after checking they exist."""
        layers = list(layers) if layers is not None else self.default_layers()
        bad = [layer for layer in layers if not 0 <= layer <= self.num_layers]
        if bad:
            raise ValueError(f"layers {bad} are outside 0..{self.num_layers}")
        return layers

    @torch.no_grad()
    def next_token_logits(self, final_hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits (float32) from final-layer hidden states: LM head plus any logit soft-capping."""
        head = self.model.get_output_embeddings()
        logits = head(final_hidden.to(self.device, head.weight.dtype)).float()
        cap = getattr(self.config, "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    def summarize(self, final_hidden: torch.Tensor, topk: int = TOP_K) -> LogitSummary:
        """Entropy and top-``topk`` of the next-token distribution at each row of ``final_hidden`` ``[N, d]``,
        computed in chunks so that full-vocabulary logits never exist for more than a chunk of positions."""
        chunk = max(1, LOGIT_CHUNK_ELEMENTS // int(self.config.vocab_size))
        parts = []
        for i in range(0, final_hidden.shape[0], chunk):
            logits = self.next_token_logits(final_hidden[i:i + chunk])
            parts += [summarize_logits(logits[j:j + SUMMARY_ROWS], topk) for j in range(0, len(logits), SUMMARY_ROWS)]
        return LogitSummary(entropy=torch.cat([p.entropy for p in parts]),
                            topk_ids=torch.cat([p.topk_ids for p in parts]),
                            topk_probs=torch.cat([p.topk_probs for p in parts]))

    @torch.no_grad()
    def decode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
               layers: Sequence[int], cache=None) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """One decoder pass over ``input_ids`` ``[B, T]`` (left padding masked by ``attention_mask``
        ``[B, past + T]``). Returns the final hidden states ``[B, T, d]`` (after the final norm) and the
        hidden states of ``layers`` (0 = embeddings, ``num_layers`` = final), all on the model's device."""
        out = self.decoder(input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device),
                           position_ids=position_ids.to(self.device), cache=cache, use_cache=cache is not None,
                           output_hidden_states=True)
        return out.last_hidden_state, {layer: out.hidden_states[layer] for layer in layers}

    @torch.no_grad()
    def features(self, sequences: Sequence[Sequence[int]], layers: Sequence[int] | None = None,
                 max_tokens: int = FORWARD_TOKENS, topk: int = TOP_K) -> list[SequenceFeatures]:
        """Teacher-forced features of every position of each sequence (with the top-``topk`` next tokens), in
        batched left-padded passes of about ``max_tokens`` padded tokens (sequences grouped by length)."""
        layers = self.check_layers(layers)
        out: list[SequenceFeatures | None] = [None] * len(sequences)
        for group in group_by_length([len(s) for s in sequences], max_tokens):
            rows = [list(sequences[i]) for i in group]
            ids, mask = left_pad(rows)
            final, hidden = self.decode(ids, mask, positions_from_mask(mask), layers)
            summaries = self.split_summary(self.summarize(final[mask.to(final.device).bool()], topk),
                                           map(len, rows))
            for k, (i, summary) in enumerate(zip(group, summaries)):
                n = len(rows[k])
                out[i] = self.make_features(rows[k], summary, {layer: h[k, -n:] for layer, h in hidden.items()})
        return out

    @staticmethod
    def split_summary(summary: LogitSummary, lengths) -> list[LogitSummary]:
        """Per-row pieces of a summary computed over the concatenated real positions of several rows."""
        bounds = [0]
        for n in lengths:
            bounds.append(bounds[-1] + n)
        return [LogitSummary(summary.entropy[a:b], summary.topk_ids[a:b], summary.topk_probs[a:b])
                for a, b in zip(bounds, bounds[1:])]

    def sequence_features(self, ids: Sequence[int], layers: Sequence[int] | None = None) -> SequenceFeatures:
        """Features of every position of one token sequence (one teacher-forced pass)."""
        return self.features([ids], layers)[0]

    def prompt_features(self, prompt: str, layers: Sequence[int] | None = None) -> SequenceFeatures:
        """Features of a chat-formatted prompt (one forward pass)."""
        return self.sequence_features(self.chat_ids(prompt), layers)

    def make_features(self, ids: Sequence[int], summary: LogitSummary,
                      hidden: dict[int, torch.Tensor]) -> SequenceFeatures:
        """:class:`SequenceFeatures` on the CPU (hidden states as float32) from per-position parts."""
        return SequenceFeatures(
            input_ids=torch.tensor(list(ids), dtype=torch.long), tokens=self.token_strings(ids),
            entropy=summary.entropy.float().cpu(), topk_ids=summary.topk_ids.cpu(),
            topk_probs=summary.topk_probs.float().cpu(),
            hidden={layer: h.float().cpu() for layer, h in hidden.items()},
        )


class PromptTokenizer(TargetModel):
    """A model's tokenizer and config without its weights: :meth:`TargetModel.chat_ids` refuses a prompt too long
    for the context (or empty, binary) in about a second, before the weights load."""

    def __init__(self, tokenizer, config, source: ModelSource) -> None:  # no weights: not TargetModel.__init__
        self.tokenizer, self.config, self.source, self._prefixes = tokenizer, config, source, {}

    @classmethod
    def of(cls, spec: str) -> PromptTokenizer | None:
        """The tokenizer of model ``spec`` where it loads without the weights (a local checkpoint folder, a GGUF
        file's converted copy); None elsewhere (a hub id, a GGUF not yet converted: the load that needs the weights
        says what is wrong)."""
        from transformers import AutoConfig

        try:
            source = resolve_source(spec)
            if not source.local:
                return None
            path, options = source.path, load_options(source)
            if source.gguf_file:
                path, options = find_converted(Path(source.path) / source.gguf_file), LOCAL_LOAD_OPTIONS
            if path is None:
                return None
            return cls(AutoTokenizer.from_pretrained(path, **options), AutoConfig.from_pretrained(path, **options),
                       source)
        except Exception:  # noqa: BLE001 - any failure: the model's own load reports it
            return None
