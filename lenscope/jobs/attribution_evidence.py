"""The attribution evidence table on a stored dataset (:mod:`analysis.egtp.evidence`).

A learned attention-pooling head, with no entropy in its path, is trained at ``layer`` on the train split's
prompt states (the validation split picks its epoch). Every importance measure x control is then computed on
the test split's pooled prompt tokens for it and for the stored static heads (mean pooling; EGTP pooling,
flagged true by construction). The table, its verdict and the paper's r are stored as one result, keyed by the
runs and the static heads they read.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from analysis.core.progress import Progress, no_progress
from analysis.egtp.attention_head import train_attention_head
from analysis.egtp.evidence import RunArrays, head_evidence, verdict
from analysis.egtp.training import HeadConfig
from cache.store import Store, text_hash
from lenscope.jobs.datasets import dataset_runs
from lenscope.jobs.egtp import PAPER_PEARSON, STATIC_KIND, load_predictor, predictor_name

EVIDENCE_KIND = "attribution_evidence"
STATIC_HEADS = ("mean", "egtp")


def evidence_config(dataset: str, layer: int, run_ids: Sequence[int], static_ids: dict[str, int], epochs: int,
                    n_boot: int, n_perm: int) -> dict:
    """What the stored table depends on: the runs (by a digest of their ids) and the static heads it read."""
    digest = text_hash(",".join(map(str, sorted(run_ids))))[:16]
    return {"dataset": dataset, "layer": layer, "runs": digest, "static_heads": static_ids, "epochs": epochs,
            "n_boot": n_boot, "n_perm": n_perm}


def load_run_arrays(store: Store, run_ids: Sequence[int], layer: int, label: str,
                    on_progress: Progress = no_progress) -> list[RunArrays]:
    """Prompt states at ``layer`` and prompt entropies of the stored runs, as the attribution reads them."""
    out = []
    for i, run_id in enumerate(run_ids):
        run = store.load_run(int(run_id), layers=[layer])
        p = run.prompt_len
        out.append(RunArrays(int(run_id), run.features.hidden[layer][:p].float(), run.features.entropy[:p].float(),
                             run.content_start, float(run.output_length)))
        on_progress(i + 1, len(run_ids), f"loading {label} runs")
    return out


def attribution_evidence(store: Store, dataset: str, layer: int, epochs: int = 60, include_censored: bool = False,
                         n_boot: int = 1000, n_perm: int = 200, on_progress: Progress = no_progress) -> dict:
    """The evidence payload (``table`` rows, ``verdict``, ``paper_pearson``, run counts) of ``dataset`` at
    ``layer``, computed once and kept as an ``attribution_evidence`` result. The static heads must be trained
    (`python -m lenscope train-egtp`); the attention head is trained here."""
    runs = dataset_runs(store, dataset, include_censored)
    split = {s: runs.loc[runs["split"] == s, "run_id"].astype(int).tolist() for s in ("train", "val", "test")}
    if not split["test"] or not split["train"]:
        raise ValueError(f"dataset {dataset!r} needs train and test runs (it has {len(split['train'])} train and "
                         f"{len(split['test'])} test runs)")
    static = {h: load_predictor(store, STATIC_KIND, predictor_name(STATIC_KIND, dataset, layer, h))
              for h in STATIC_HEADS}
    config = evidence_config(dataset, layer, runs["run_id"].tolist(), {h: s[2] for h, s in static.items()}, epochs,
                             n_boot, n_perm)
    cached = store.get_result(EVIDENCE_KIND, config)
    if cached is not None:
        return cached
    train, val, test = (load_run_arrays(store, split[s], layer, s, on_progress) for s in ("train", "val", "test"))
    result = train_attention_head([r.hidden[r.content_start:] for r in train], _lengths(train),
                                  [r.hidden[r.content_start:] for r in val], _lengths(val) if val else None,
                                  HeadConfig(epochs=epochs),
                                  on_epoch=lambda e, n, _: on_progress(e, n, "training the attention head"))
    options = {"layer": layer, "n_boot": n_boot, "n_perm": n_perm, "on_progress": on_progress}
    tables = [head_evidence(test, result.head, name="attention pooling (learned)", **options)]
    for name, (head, meta, _) in static.items():
        tables.append(head_evidence(test, head, name=f"{name} pooling", pooling=meta["pooling"], alpha=meta["alpha"],
                                    **options))
    table = pd.concat(tables, ignore_index=True)
    records = table.astype(object).where(table.notna(), None).to_dict("records")  # JSON: no NaN (PostgreSQL)
    payload = {"table": records, "verdict": verdict(table, PAPER_PEARSON),
               "paper_pearson": PAPER_PEARSON, "layer": layer,
               "runs": {s: len(ids) for s, ids in split.items()}, "attention_best_epoch": result.best_epoch}
    store.put_result(EVIDENCE_KIND, f"attribution evidence {dataset} L{layer}", config, payload)
    return payload


def _lengths(runs: Sequence[RunArrays]) -> torch.Tensor:
    return torch.tensor([r.true_length for r in runs])
