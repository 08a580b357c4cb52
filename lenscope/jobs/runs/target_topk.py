"""The target's top-k next-token distribution at every position of a stored run (the drafters' KL target): kept
in the store once per run, taken from the import's own forward pass, or else from the run's stored final states."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lenscope.analysis.drafter.training import target_topk
from lenscope.models.target import SequenceFeatures, TargetModel
from lenscope.store.store import Store, StoredRun

TOPK = 32  # target distribution truncated to its top-32 tokens for the drafters' KL
TOPK_KIND = "drafter_target_topk"


def _config(run_id: int, target: TargetModel) -> dict:
    return {"run_id": run_id, "model": target.key, "k": TOPK}


def _kept(store: Store, target: TargetModel, run_id: int, compute) -> dict[str, torch.Tensor]:
    return store.memo_tensors(TOPK_KIND, f"run {run_id} target top-{TOPK}", _config(run_id, target), compute)


def run_target_topk(store: Store, target: TargetModel, run: StoredRun) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's top-:data:`TOPK` next-token ids and (full-softmax) log-probabilities at every position of a
    stored run: kept by its import, else computed once from its stored final layer (a full-vocabulary LM head) on
    the target's device and kept for every later drafter."""
    def compute() -> dict[str, torch.Tensor]:  # the final layer is read only when the top-k is not kept yet
        final = store.load_run(run.id, layers=[target.num_layers]).features.hidden
        if target.num_layers not in final:
            raise ValueError(f"run {run.id} has no stored hidden states for layer {target.num_layers}")
        ids, logp = target_topk(target.next_token_logits(final[target.num_layers]), TOPK)  # on the target's device
        return {"ids": ids.int().cpu(), "logp": logp.half().cpu()}

    kept = _kept(store, target, run.id, compute)
    return kept["ids"].long(), kept["logp"]


def keep_import_topk(store: Store, target: TargetModel, run_ids: Sequence[int],
                     features: Sequence[SequenceFeatures]) -> None:
    """Keep the top-:data:`TOPK` of features computed with ``topk=TOPK`` for their runs (what
    :func:`run_target_topk` would compute, from the unrounded final states of the same pass)."""
    for run_id, f in zip(run_ids, features):
        _kept(store, target, run_id, lambda f=f: {"ids": f.topk_ids[:, :TOPK].int(),
                                                  "logp": f.topk_probs[:, :TOPK].log().half()})
