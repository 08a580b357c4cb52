"""An EAGLE-3-style speculative drafter with a remaining-length head (OUTLETS).

The drafter reads the target's hidden states from a low, a middle and a high layer at position
``p``, fuses them (per-dimension standardisation with training statistics, per-layer RMSNorm,
concat, linear to the hidden size), combines them with the frozen target embedding of the *next*
token ``x[p+1]`` (EAGLE style), runs one lightweight decoder layer (causal self-attention with an
optional sigmoid output gate, SwiGLU MLP) and produces a draft representation ``r_p``. Two heads
read ``r_p``: the draft-token head (the target's frozen LM head) predicts ``x[p+2]``, and the length
head predicts ``z = log(1 + remaining length)``.

As in EAGLE-3 the draft-token head may cover a reduced draft vocabulary (``draft_vocab_size`` > 0: the
most frequent target tokens of the training split, kept as the ``draft_ids`` buffer): its logits are over
those tokens only, and :meth:`Drafter.target_ids` maps draft indices back to target ids. A drafter then
gives probability zero to every other token, which speculative verification handles losslessly.

Only the trainable weights are saved (``config.json`` + ``model.safetensors`` in a directory); the
frozen embedding and LM head come from whichever target the drafter is loaded for, which must have
the same hidden size and vocabulary.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from lenscope.models.atomic_files import save_tensors, write_text

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
LENGTH_MODES = ("regression", "classification")


def log_length(remaining: torch.Tensor) -> torch.Tensor:
    """The length target z = log(1 + remaining tokens)."""
    return torch.log1p(remaining.float())


def length_from_log(z: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`log_length`, clipped at zero tokens."""
    return torch.expm1(z).clamp_min(0.0)


class LengthHead(nn.Module):
    """A small MLP predicting z = log1p(length): a scalar (regression) or a distribution over
    ``n_bins`` evenly spaced z values in ``[0, max_log]`` whose expected value is the prediction.

    Its input is standardised per dimension by a non-affine batch norm (running statistics kept as
    buffers, used at inference), so the head does not depend on the changing scale of the
    representations it reads. A regression head outputs the *standardised* z,
    ``(z - z_mean) / z_std``, with the training statistics kept as buffers (set by
    :meth:`fit_target`): the loss is the squared error of the standardised log length and
    :meth:`predict_log` inverts the scaling.
    """

    def __init__(self, in_dim: int, hidden: int = 256, mode: str = "regression", n_bins: int = 50,
                 max_log: float = math.log1p(2048)) -> None:
        super().__init__()
        if mode not in LENGTH_MODES:
            raise ValueError(f"length mode must be one of {LENGTH_MODES}, not {mode!r}")
        self.mode = mode
        self.input_norm = nn.BatchNorm1d(in_dim, affine=False)
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(),
                                 nn.Linear(hidden, 1 if mode == "regression" else n_bins))
        self.register_buffer("centers", torch.linspace(0.0, max_log, n_bins), persistent=False)
        self.register_buffer("z_mean", torch.zeros(()))
        self.register_buffer("z_std", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if not self.training or len(flat) > 1:
            flat = self.input_norm(flat)
        out = self.mlp(flat).reshape(*x.shape[:-1], -1)
        return out.squeeze(-1) if self.mode == "regression" else out

    def predict_log(self, out: torch.Tensor) -> torch.Tensor:
        """z from the head output (de-standardised, or the expected bin centre for classification)."""
        if self.mode == "regression":
            return out * self.z_std + self.z_mean
        return torch.softmax(out, dim=-1) @ self.centers

    def loss(self, out: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Squared error of the standardised z (regression) or cross-entropy on the nearest bin."""
        if self.mode == "regression":
            return F.mse_loss(out, (z - self.z_mean) / self.z_std)
        step = self.centers[1] - self.centers[0]
        bins = torch.round(z / step).long().clamp(0, len(self.centers) - 1)
        return F.cross_entropy(out, bins)

    @torch.no_grad()
    def fit_target(self, z: torch.Tensor) -> None:
        """Store the training mean and std of z, so the head starts at the mean and learns unit-scale
        deviations from it."""
        if len(z):
            self.z_mean.fill_(float(z.float().mean()))
            self.z_std.fill_(float(z.float().std()) if len(z) > 1 else 1.0)
            self.z_std.clamp_(min=1e-3)

    def l2(self) -> torch.Tensor:
        """Sum of squared weights (the gamma-regulariser of the OUTLETS objective)."""
        return sum((p ** 2).sum() for p in self.mlp.parameters())


def feature_statistics(states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and std (floored) of hidden states [N, d], for input standardisation."""
    states = states.float()
    std = states.std(0) if len(states) > 1 else torch.ones(states.shape[1])
    return states.mean(0), std.clamp_min(1e-4)


@dataclass
class DrafterConfig:
    """Shape and switches of a :class:`Drafter` (saved as config.json)."""

    hidden_size: int
    vocab_size: int
    fuse_layers: list[int] = field(default_factory=lambda: [2, 15, 27])
    num_heads: int = 9
    intermediate_size: int = 1536
    gated_attention: bool = True
    use_decoder: bool = True
    length_mode: str = "regression"
    length_bins: int = 50
    length_hidden: int = 256
    max_log_length: float = math.log1p(2048)
    rope_theta: float = 100000.0
    rms_eps: float = 1e-5
    draft_vocab_size: int = 0          # 0: the draft head covers the whole target vocabulary

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden size {self.hidden_size} is not divisible by {self.num_heads} heads")
        if len(self.fuse_layers) != 3:
            raise ValueError(f"the drafter fuses exactly 3 target layers, got {self.fuse_layers}")
        if not 0 <= self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft vocabulary of {self.draft_vocab_size} tokens is outside 0..{self.vocab_size}")


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding of ``x`` [B, H, S, D] at integer ``positions`` [B, S]."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float32, device=x.device) / half)
    angles = positions.float().unsqueeze(-1) * inv_freq          # [B, S, half]
    cos, sin = angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


KV = tuple[torch.Tensor, torch.Tensor]


class GatedSelfAttention(nn.Module):
    """Multi-head self-attention with RoPE; with ``gated`` the attention output is multiplied by
    ``sigmoid(W_g x)`` before the output projection (gated attention)."""

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.heads, self.head_dim, self.theta = config.num_heads, config.head_dim, config.rope_theta
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate_proj = nn.Linear(d, d, bias=False) if config.gated_attention else None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, past: KV | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, KV]:
        """``x`` [B, S, d] at ``positions`` [B, S]; ``past`` keys/values are prepended; ``mask``
        [B, S, past+S] (True = may attend) replaces the default causal mask. Returns the output and
        all keys/values (past included)."""
        q = rotary(self._heads(self.q_proj(x)), positions, self.theta)
        k = rotary(self._heads(self.k_proj(x)), positions, self.theta)
        v = self._heads(self.v_proj(x))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        if mask is None and past is not None:
            raise ValueError("attention over past keys needs an explicit mask")
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.unsqueeze(1),
                                              is_causal=mask is None)
        out = attn.transpose(1, 2).reshape(x.shape)
        if self.gate_proj is not None:
            out = out * torch.sigmoid(self.gate_proj(x))
        return self.o_proj(out), (k, v)


class DecoderLayer(nn.Module):
    """Pre-norm transformer block: gated self-attention and a SwiGLU MLP."""

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        d, m = config.hidden_size, config.intermediate_size
        self.attn_norm = nn.RMSNorm(d, eps=config.rms_eps)
        self.attn = GatedSelfAttention(config)
        self.mlp_norm = nn.RMSNorm(d, eps=config.rms_eps)
        self.gate, self.up = nn.Linear(d, m, bias=False), nn.Linear(d, m, bias=False)
        self.down = nn.Linear(m, d, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, past: KV | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, KV]:
        attn, kv = self.attn(self.attn_norm(x), positions, past, mask)
        h = x + attn
        y = self.mlp_norm(h)
        return h + self.down(F.silu(self.gate(y)) * self.up(y)), kv


class Drafter(nn.Module):
    """EAGLE-3-style draft model with a draft-token head and a length head (see module docstring)."""

    def __init__(self, config: DrafterConfig, embed_weight: torch.Tensor, head_weight: torch.Tensor) -> None:
        super().__init__()
        check_frozen_weights(config, embed_weight, head_weight)
        d = config.hidden_size
        self.config = config
        self.register_buffer("embed_weight", embed_weight.detach().float(), persistent=False)
        self.register_buffer("head_weight", head_weight.detach().float(), persistent=False)
        if config.draft_vocab_size:
            self.register_buffer("draft_ids", torch.arange(config.draft_vocab_size))
        self.set_draft_vocab(self.draft_ids if config.draft_vocab_size else None)
        self.register_buffer("feature_mean", torch.zeros(len(config.fuse_layers), d))
        self.register_buffer("feature_std", torch.ones(len(config.fuse_layers), d))
        self.layer_norms = nn.ModuleList(nn.RMSNorm(d, eps=config.rms_eps) for _ in config.fuse_layers)
        self.fuse = nn.Linear(3 * d, d, bias=False)
        self.embed_norm = nn.RMSNorm(d, eps=config.rms_eps)
        self.feature_norm = nn.RMSNorm(d, eps=config.rms_eps)
        self.combine = nn.Linear(2 * d, d, bias=False)
        self.decoder = DecoderLayer(config) if config.use_decoder else None
        self.final_norm = nn.RMSNorm(d, eps=config.rms_eps)
        self.length_head = LengthHead(d, config.length_hidden, config.length_mode, config.length_bins,
                                      config.max_log_length)

    # draft vocabulary ------------------------------------------------------------------------
    @torch.no_grad()
    def set_draft_vocab(self, ids: torch.Tensor | None) -> None:
        """Use target tokens ``ids`` (``draft_vocab_size`` of them, distinct) as the draft vocabulary; None keeps
        the full vocabulary. Sets the draft head's rows and the target -> draft index map (-1: not drafted)."""
        vocab = self.config.vocab_size
        if ids is None:
            self.register_buffer("draft_head", self.head_weight, persistent=False)
            self.register_buffer("draft_index", torch.arange(vocab), persistent=False)
            return
        ids = torch.as_tensor(ids, dtype=torch.long)
        if len(ids) != self.config.draft_vocab_size or len(ids.unique()) != len(ids):
            raise ValueError(f"need {self.config.draft_vocab_size} distinct draft tokens, got {len(ids)}")
        self.draft_ids.copy_(ids)
        self.register_buffer("draft_head", self.head_weight[ids], persistent=False)
        index = torch.full((vocab,), -1, dtype=torch.long)
        index[ids] = torch.arange(len(ids))
        self.register_buffer("draft_index", index, persistent=False)

    def target_ids(self, draft: torch.Tensor) -> torch.Tensor:
        """Target token ids of draft-vocabulary indices."""
        return self.draft_ids[draft] if self.config.draft_vocab_size else draft

    # building blocks -------------------------------------------------------------------------
    @torch.no_grad()
    def fit_inputs(self, hidden: list[torch.Tensor]) -> None:
        """Store per-dimension training statistics of the three fused layers' states ([N, d] each):
        target states have a few huge "massive activation" dimensions that would otherwise dominate
        the per-token RMSNorm and hide the rest of the signal."""
        for i, states in enumerate(hidden):
            self.feature_mean[i], self.feature_std[i] = feature_statistics(states)

    def fuse_features(self, hidden: list[torch.Tensor]) -> torch.Tensor:
        """Fused low/mid/high target states [..., d] from the three layers' states, in order (each
        standardised with the training statistics, then RMS-normalised)."""
        parts = [norm((h.float() - mean) / std)
                 for norm, h, mean, std in zip(self.layer_norms, hidden, self.feature_mean, self.feature_std)]
        return self.fuse(torch.cat(parts, dim=-1))

    def step(self, features: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor,
             past: KV | None = None, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, KV | None]:
        """Draft representations [B, S, d] from features (fused target states, or the drafter's own
        previous representations when drafting ahead) and the next tokens' ids [B, S]."""
        tokens = F.embedding(next_ids, self.embed_weight)
        x = self.combine(torch.cat([self.embed_norm(tokens), self.feature_norm(features)], dim=-1))
        kv = None
        if self.decoder is not None:
            x, kv = self.decoder(x, positions, past, mask)
        return self.final_norm(x), kv

    def forward(self, hidden: list[torch.Tensor], next_ids: torch.Tensor) -> tuple[torch.Tensor, KV | None]:
        """Teacher-forced pass over a batch: ``hidden`` three tensors [B, S, d] (positions 0..S-1),
        ``next_ids`` [B, S] the token following each position. Returns representations and keys/values."""
        b, s = next_ids.shape
        positions = torch.arange(s, device=next_ids.device).expand(b, s)
        return self.step(self.fuse_features(hidden), next_ids, positions)

    def draft_logits(self, rep: torch.Tensor) -> torch.Tensor:
        """Logits of the token after the next one over the draft vocabulary, through the frozen LM head."""
        return rep @ self.draft_head.T

    def length_output(self, rep: torch.Tensor) -> torch.Tensor:
        """Raw length-head output (z, or bin logits)."""
        return self.length_head(rep)

    def predict_log_length(self, rep: torch.Tensor) -> torch.Tensor:
        """Predicted z = log1p(remaining length)."""
        return self.length_head.predict_log(self.length_head(rep))

    @torch.no_grad()
    def draft(self, hidden: list[torch.Tensor], next_ids: torch.Tensor, starts: torch.Tensor, k: int,
              chunk: int = 64) -> torch.Tensor:
        """Greedy drafts of ``k`` tokens from each start position of ONE sequence.

        ``hidden`` three [T, d] tensors, ``next_ids`` [T]. From start ``p`` the first draft is the
        argmax at ``p`` (the token at ``p+2``); step ``i`` feeds the previous draft token and the
        drafter's own previous representation at position ``p+i-1``, attending to the teacher-forced
        keys ``<= p`` and to its own drafted keys. Returns [len(starts), k] token ids.
        """
        rep, kv = self.forward([h.unsqueeze(0) for h in hidden], next_ids.unsqueeze(0))
        out = []
        for begin in range(0, len(starts), chunk):
            out.append(self._draft_chunk(rep[0], kv, starts[begin:begin + chunk], k))
        return torch.cat(out) if out else torch.empty(0, k, dtype=torch.long)

    def _draft_chunk(self, rep: torch.Tensor, kv: KV | None, starts: torch.Tensor, k: int) -> torch.Tensor:
        b, t = len(starts), rep.shape[0]
        prev = rep[starts].unsqueeze(1)                                   # [B, 1, d]
        tokens = self.target_ids(self.draft_logits(prev).argmax(-1))      # [B, 1]
        drafts = [tokens]
        past = None if kv is None else (kv[0].expand(b, -1, -1, -1), kv[1].expand(b, -1, -1, -1))
        visible = (torch.arange(t, device=rep.device).unsqueeze(0) <= starts.unsqueeze(1)).unsqueeze(1)
        for i in range(1, k):
            mask = None
            if past is not None:
                mask = torch.cat([visible, visible.new_ones(b, 1, past[0].shape[2] - t + 1)], dim=-1)
            prev, past = self.step(prev, tokens, (starts + i).unsqueeze(1), past, mask)
            tokens = self.target_ids(self.draft_logits(prev).argmax(-1))
            drafts.append(tokens)
        return torch.cat(drafts, dim=1)

    # persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` (trainable weights only) into ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_text(path / CONFIG_FILE, json.dumps({"type": "lenscope-drafter", **asdict(self.config)}, indent=2))
        save_tensors({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}, path / WEIGHTS_FILE)
        return path

    @classmethod
    def load(cls, path: str | Path, embed_weight: torch.Tensor, head_weight: torch.Tensor) -> Drafter:
        """Load a saved drafter on top of a target's frozen embedding and LM head."""
        path = Path(path)
        if not (path / CONFIG_FILE).exists() or not (path / WEIGHTS_FILE).exists():
            raise FileNotFoundError(f"{path} is not a saved drafter (needs {CONFIG_FILE} and {WEIGHTS_FILE})")
        raw = json.loads((path / CONFIG_FILE).read_text())
        if raw.pop("type", None) != "lenscope-drafter":
            raise ValueError(f"{path / CONFIG_FILE} does not describe a lenscope drafter")
        drafter = cls(DrafterConfig(**raw), embed_weight, head_weight)
        drafter.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
        if drafter.config.draft_vocab_size:
            drafter.set_draft_vocab(drafter.draft_ids.clone())
        return drafter.eval()

    @classmethod
    def for_target(cls, target, **overrides) -> Drafter:
        """A freshly initialised drafter shaped for ``target`` (a :class:`lenscope.models.target.TargetModel`)."""
        cfg = target.config
        config = DrafterConfig(hidden_size=target.hidden_size, vocab_size=int(cfg.vocab_size),
                               fuse_layers=target.default_layers()[:3],
                               num_heads=int(cfg.num_attention_heads),
                               intermediate_size=int(getattr(cfg, "intermediate_size", 4 * target.hidden_size)),
                               **overrides)
        return cls(config, *frozen_weights(target))

    @classmethod
    def load_for_target(cls, path: str | Path, target) -> Drafter:
        """Load a saved drafter for ``target``; clear errors when shapes or layers do not fit."""
        drafter = cls.load(path, *frozen_weights(target))
        missing = [layer for layer in drafter.config.fuse_layers if layer > target.num_layers]
        if missing:
            raise ValueError(f"the drafter fuses layers {missing}, but the target has {target.num_layers} layers")
        return drafter


def frozen_weights(target) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding and LM head matrices (both [vocab, d]), detached on the CPU."""
    embed = target.model.get_input_embeddings().weight.detach().float().cpu()
    head = target.model.get_output_embeddings().weight.detach().float().cpu()
    return embed, head


def check_frozen_weights(config: DrafterConfig, embed_weight: torch.Tensor, head_weight: torch.Tensor) -> None:
    """Raise ValueError unless the embedding and head match the drafter's hidden size and vocabulary."""
    for name, weight in (("embedding", embed_weight), ("LM head", head_weight)):
        if weight.dim() != 2 or weight.shape[1] != config.hidden_size:
            raise ValueError(f"the drafter has hidden size {config.hidden_size}, but the target's {name} "
                             f"has shape {tuple(weight.shape)}: load it for a target with hidden size "
                             f"{config.hidden_size}")
        if weight.shape[0] != config.vocab_size:
            raise ValueError(f"the drafter's vocabulary has {config.vocab_size} tokens, but the target's "
                             f"{name} has {weight.shape[0]}")
