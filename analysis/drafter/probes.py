"""TRAIL-style probes: one target layer's hidden state -> MLP -> remaining length, plus the generic
per-run remaining-length samples used by every step-wise length predictor."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from lenscope.analysis.core.training import fit_minibatch
from lenscope.analysis.egtp.plp import plp_steps
from lenscope.models.atomic_files import save_tensors, write_text
from lenscope.models.drafter import LengthHead, feature_statistics, length_from_log, log_length

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass
class StepSamples:
    """Decoding steps of one run: after ``steps[i]`` generated tokens the newest available hidden
    state is at ``positions[i]`` and ``remaining[i]`` tokens are still to come."""

    steps: np.ndarray
    positions: np.ndarray
    remaining: np.ndarray


def remaining_length_samples(prompt_len: int, output_length: int, max_step: int | None = None) -> StepSamples:
    """Steps ``t = 0 .. min(L-1, max_step)`` of a run with prompt length ``P`` and output length ``L``:
    the last visible position is ``P - 1 + t`` (step 0 = right after prefill) and the true remaining
    length is ``L - t``."""
    steps = plp_steps(output_length, max_step)
    return StepSamples(steps=steps, positions=prompt_len - 1 + steps, remaining=output_length - steps)


PROBE_VIEWS = ("last", "pooled")


def step_features(hidden: Sequence[torch.Tensor], positions: np.ndarray, view: str = "last") -> torch.Tensor:
    """Probe features [S, k*d] of ``k`` layers' states ([T, d] each) at ``positions`` [S] (the last visible
    position of each step): view ``last``, each layer's state there; ``pooled`` [S, 2*k*d], also the mean of each
    layer's states over positions 0..p, every position a drafter attends over at that step."""
    if view not in PROBE_VIEWS:
        raise ValueError(f"view must be one of {PROBE_VIEWS}, not {view!r}")
    pos = torch.as_tensor(np.asarray(positions), dtype=torch.long)
    parts = [h[pos].float() for h in hidden]
    if view == "pooled":
        parts += [h.float().cumsum(0)[pos] / (pos[:, None] + 1) for h in hidden]
    return torch.cat(parts, dim=1)


@dataclass
class ProbeConfig:
    """Shape of a :class:`LengthProbe` (saved as config.json)."""

    in_dim: int
    layer: int
    mode: str = "regression"
    hidden: int = 256
    n_bins: int = 50
    max_log: float = math.log1p(2048)


class LengthProbe(nn.Module):
    """Standardised hidden state -> :class:`LengthHead` (regression of z, or binned expected value)."""

    def __init__(self, config: ProbeConfig) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("mean", torch.zeros(config.in_dim))
        self.register_buffer("std", torch.ones(config.in_dim))
        self.head = LengthHead(config.in_dim, config.hidden, config.mode, config.n_bins, config.max_log)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head((x.float() - self.mean) / self.std)

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted remaining length in tokens."""
        return length_from_log(self.head.predict_log(self(x)))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_text(path / CONFIG_FILE, json.dumps({"type": "lenscope-probe", **asdict(self.config)}, indent=2))
        save_tensors({k: v.contiguous() for k, v in self.state_dict().items()}, path / WEIGHTS_FILE)
        return path

    @classmethod
    def load(cls, path: str | Path) -> LengthProbe:
        path = Path(path)
        raw = json.loads((path / CONFIG_FILE).read_text())
        if raw.pop("type", None) != "lenscope-probe":
            raise ValueError(f"{path / CONFIG_FILE} does not describe a lenscope probe")
        probe = cls(ProbeConfig(**raw))
        probe.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
        return probe.eval()


@dataclass(frozen=True)
class _Optimisation:
    """The optimisation settings :func:`lenscope.analysis.core.training.fit_minibatch` reads."""

    lr: float
    weight_decay: float
    batch_size: int
    epochs: int
    seed: int


def train_probe(x: torch.Tensor, remaining: torch.Tensor, config: ProbeConfig, epochs: int = 30,
                lr: float = 1e-3, batch_size: int = 256, weight_decay: float = 1e-2, seed: int = 0,
                on_epoch: Callable[[int, float], None] | None = None,
                val: tuple[torch.Tensor, torch.Tensor] | None = None) -> LengthProbe:
    """Fit a probe on features ``x`` [N, d] and true remaining lengths [N] with the shared minibatch loop
    (:func:`lenscope.analysis.core.training.fit_minibatch`: AdamW). With ``val`` (features, remaining lengths) the epoch
    with the lowest validation MAE in tokens is kept, else the last; ``probe.best_epoch`` and ``probe.history``
    record it."""
    if len(x) == 0:
        raise ValueError("no training samples for the probe")
    torch.manual_seed(seed)
    probe = LengthProbe(config)
    mean, std = feature_statistics(x)
    probe.mean.copy_(mean)
    probe.std.copy_(std)
    z = log_length(remaining)
    probe.head.fit_target(z)

    def loss(model: nn.Module, xb: torch.Tensor, zb: torch.Tensor) -> torch.Tensor:
        return model.head.loss(model(xb), zb)

    val_score = None
    if val is not None and len(val[0]):
        def val_score(model: nn.Module) -> float:
            return float((model.predict(val[0]) - val[1].float()).abs().mean())

    best, history = fit_minibatch(probe, x, z, loss, _Optimisation(lr, weight_decay, batch_size, epochs, seed),
                                  val_score, None if on_epoch is None else lambda e, _, row: on_epoch(e, row["loss"]))
    probe.best_epoch, probe.history = best, history
    return probe.eval()
