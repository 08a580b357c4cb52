"""What the store reads of a model and of a generation, as shapes rather than imports: the store knows nothing of
the model layer. :class:`lenscope.models.target.TargetModel` and :class:`lenscope.models.engine.Generation` have
these attributes; a run read back carries its features as :class:`RunFeatures`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class ModelSourceShape(Protocol):
    spec: str
    gguf_file: str | None


class ModelShape(Protocol):
    """A loaded target model as the store records it: its key, where it came from, its size and dtype."""

    key: str
    source: ModelSourceShape
    num_layers: int
    hidden_size: int
    dtype: str


class GenerationShape(Protocol):
    """A generated answer as the store keeps it (its features, with the fields of :class:`RunFeatures`, become one
    tensor file)."""

    prompt_len: int
    features: RunFeatures
    text: str
    finished: bool
    settings: dict
    duration_s: float
    output_ids: list[int]
    content_start: int


@dataclass
class RunFeatures:
    """A run's per-position features as the store writes and reads them (a target model's features have the same
    fields; the store does not import them): ``entropy[i]`` is the entropy of the next-token distribution at position
    ``i``; ``hidden[layer][i]`` the state after ``layer`` decoder layers)."""

    input_ids: torch.Tensor
    tokens: list[str]
    entropy: torch.Tensor
    topk_ids: torch.Tensor
    topk_probs: torch.Tensor
    hidden: dict[int, torch.Tensor]

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])
