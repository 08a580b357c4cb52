"""Per-run pooled features (prompt poolings, prefix EGTP of the answer), computed once and kept in the store."""

from __future__ import annotations

import torch

from lenscope.analysis.egtp.pooling import POOLINGS, pool, prefix_pool
from lenscope.store.store import Store, StoredRun

FEATURES_KIND = "egtp_features"
FEATURES_VERSION = 2  # 2: prompt poolings start at the user content, not the chat template


def compute_run_features(run: StoredRun, layer: int, alpha: float) -> dict[str, torch.Tensor]:
    """Prompt poolings (``prompt.<method>`` [d]) over the user's content and the assistant header (the chat
    template's fixed system turn gets no weight), and prefix EGTP of the answer (``generated.egtp`` [L, d])."""
    if layer not in run.features.hidden:
        raise ValueError(f"run {run.id} has no hidden states at layer {layer} (stored: {run.layers})")
    hidden, entropy, p, c = run.features.hidden[layer], run.features.entropy, run.prompt_len, run.content_start
    out = {f"prompt.{m}": pool(hidden[c:p], entropy[c:p], m, alpha).contiguous() for m in POOLINGS}
    answer = hidden[p:p + run.output_length]  # the answer tokens with features: all, unless they stop early
    out["generated.egtp"] = (prefix_pool(answer, entropy[p:p + run.output_length], "egtp", alpha)
                             if len(answer) else torch.zeros(0, hidden.shape[1]))
    return out


def run_features(store: Store, run_id: int, layer: int, alpha: float) -> dict[str, torch.Tensor]:
    """:func:`compute_run_features`, computed once per (run, layer, alpha) and kept in the store (a run whose features
    stop before its answer does has ``generated.egtp`` rows for its first answer tokens only, and a key of its own:
    completing the run recomputes them)."""
    positions = store.feature_positions(int(run_id))
    config = {"run_id": int(run_id), "layer": layer, "alpha": alpha, "version": FEATURES_VERSION,
              **({"positions": positions} if positions else {})}
    return store.memo_tensors(FEATURES_KIND, f"run {run_id} L{layer}", config,
                              lambda: compute_run_features(store.load_run(int(run_id), layers=[layer]), layer, alpha))
