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


def _config(run_id: int, target: TargetModel, positions: int | None) -> dict:
    """The memo key: a run whose features stop early (``positions``) has its own, so completing it recomputes."""
    return {"run_id": run_id, "model": target.key, "k": TOPK, **({"positions": positions} if positions else {})}


def _kept(store: Store, target: TargetModel, run_id: int, positions: int | None, compute) -> dict[str, torch.Tensor]:
    return store.memo_tensors(TOPK_KIND, f"run {run_id} target top-{TOPK}", _config(run_id, target, positions),
                              compute)


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

    kept = _kept(store, target, run.id, len(run.features) if run.features_cut else None, compute)
    return kept["ids"].long(), kept["logp"]


def keep_import_topk(store: Store, target: TargetModel, run_ids: Sequence[int],
                     features: Sequence[SequenceFeatures], run_lengths: Sequence[int]) -> None:
    """Keep the top-:data:`TOPK` of features computed with ``topk=TOPK`` for their runs of ``run_lengths`` prompt
    and answer tokens (what :func:`run_target_topk` would compute, from the unrounded final states of the same
    pass; features may stop before a run does)."""
    for run_id, f, n in zip(run_ids, features, run_lengths):
        _kept(store, target, run_id, len(f) if len(f) < n else None,
              lambda f=f: {"ids": f.topk_ids[:, :TOPK].int(), "logp": f.topk_probs[:, :TOPK].log().half()})
