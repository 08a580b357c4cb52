"""The attribution evidence table on a stored dataset (:mod:`lenscope.analysis.egtp.evidence`).

Two learned attention-pooling heads, with no entropy in their path (a linear and an MLP scorer), are trained at
``layer`` on the train split's prompt states (the validation split picks their epoch). Every importance measure
x control is then computed on the test split's pooled prompt tokens for them and for the stored static heads
(mean pooling; EGTP pooling, true by construction: the positive control). The table, each learned head's
verdict, the positive control, every head's test MAE and pooling-weight entropy and the paper's r are stored as
one result, keyed by the runs and the static heads they read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.egtp.attention_head import train_attention_head
from lenscope.analysis.egtp.controls import RunTokens
from lenscope.analysis.egtp.evidence import RunArrays, head_evidence, head_summaries, positive_control, verdict
from lenscope.analysis.egtp.training import HeadConfig
from lenscope.analysis.papers import EGTP_ATTRIBUTION_R
from lenscope.jobs.egtp.heads import STATIC_KIND, load_predictor, predictor_name
from lenscope.jobs.results.claims import dataset_predictors
from lenscope.jobs.runs.datasets import all_runs, dataset_runs
from lenscope.store.store import Store, text_hash

EVIDENCE_KIND = "attribution_evidence"
STATIC_HEADS = ("mean", "egtp")
ATTENTION_HEAD = "attention pooling (learned)"
ATTENTION_MLP_HEAD = "attention pooling (learned, MLP scorer)"
LEARNED_HEADS = {ATTENTION_HEAD: "linear", ATTENTION_MLP_HEAD: "mlp"}
# Version of the payload's layout; a stored result of another layout is computed again.
PAYLOAD_FORMAT = 3


def _runs_digest(run_ids: Sequence[int]) -> str:
    return text_hash(",".join(map(str, sorted(run_ids))))[:16]


def evidence_config(dataset: str, layer: int, run_ids: Sequence[int], static_ids: dict[str, int], epochs: int,
                    n_boot: int, n_perm: int, include_censored: bool) -> dict:
    """What the stored table depends on: the runs (by a digest of their ids), the static heads it read and the
    settings."""
    return {"dataset": dataset, "layer": layer, "runs": _runs_digest(run_ids), "static_heads": static_ids,
            "epochs": epochs, "n_boot": n_boot, "n_perm": n_perm, "include_censored": include_censored,
            "format": PAYLOAD_FORMAT}


def load_run_arrays(store: Store, run_ids: Sequence[int], layer: int, label: str,
                    on_progress: Progress = no_progress) -> list[RunArrays]:
    """Prompt states at ``layer`` and prompt entropies of the stored runs, as the attribution reads them."""
    out = []
    for i, run_id in enumerate(run_ids):
        run = store.load_run(int(run_id), layers=[layer])
        p = run.prompt_len
        out.append(RunArrays(int(run_id), run.features.hidden[layer][:p].float(), run.features.entropy[:p].float(),
                             run.content_start, float(run.output_length), tuple(run.features.tokens[:p])))
        on_progress(i + 1, len(run_ids), f"loading {label} runs")
    return out


def stored_evidence(store: Store, dataset: str, layer: int) -> tuple[dict, dict] | None:
    """(config, payload) of the newest evidence stored for ``dataset`` at ``layer`` on its runs and static heads
    as they are now, whatever its settings; None if there is none (nothing is computed)."""
    ids = dataset_predictors(store, dataset)
    static = {h: ids.get(predictor_name(STATIC_KIND, dataset, layer, h)) for h in STATIC_HEADS}
    if None in static.values():
        return None
    runs = all_runs(store, dataset)  # read once: both digests come from it
    digests = {True: _runs_digest(runs["run_id"].tolist()),
               False: _runs_digest(runs.loc[~runs["censored"], "run_id"].tolist())}
    stored = store.results_frame(EVIDENCE_KIND)  # newest first
    for config, payload in zip(stored["config"], stored["payload"]):
        if (config.get("format") == PAYLOAD_FORMAT and config["dataset"] == dataset and config["layer"] == layer
                and config["static_heads"] == static and config["runs"] == digests[config["include_censored"]]):
            return config, payload
    return None


def attribution_evidence(store: Store, dataset: str, layer: int, epochs: int = 60, include_censored: bool = False,
                         n_boot: int = 1000, n_perm: int = 200, on_progress: Progress = no_progress) -> dict:
    """The evidence payload of ``dataset`` at ``layer``: ``table`` rows, ``verdict``, ``paper_pearson``, run
    counts, and ``test_tokens`` (every test run's pooled tokens with their entropy and each head's importances,
    see :func:`token_records`), computed once and kept as an ``attribution_evidence`` result. The static heads
    must be trained (`python -m lenscope train-egtp`); the attention head is trained here."""
    runs = dataset_runs(store, dataset, include_censored)
    split = {s: runs.loc[runs["split"] == s, "run_id"].astype(int).tolist() for s in ("train", "val", "test")}
    if not split["test"] or not split["train"]:
        raise ValueError(f"dataset {dataset!r} needs train and test runs (it has {len(split['train'])} train and "
                         f"{len(split['test'])} test runs)")
    static = {h: load_predictor(store, STATIC_KIND, predictor_name(STATIC_KIND, dataset, layer, h))
              for h in STATIC_HEADS}
    config = evidence_config(dataset, layer, runs["run_id"].tolist(), {h: s[2] for h, s in static.items()}, epochs,
                             n_boot, n_perm, include_censored)
    return store.memo(EVIDENCE_KIND, config,
                      lambda: _evidence_payload(store, split, static, layer, epochs, n_boot, n_perm, on_progress),
                      name=f"attribution evidence {dataset} L{layer}")


def _evidence_payload(store: Store, split: dict[str, list[int]], static: dict, layer: int, epochs: int, n_boot: int,
                      n_perm: int, on_progress: Progress) -> dict:
    train, val, test = (load_run_arrays(store, split[s], layer, s, on_progress) for s in ("train", "val", "test"))
    options = {"layer": layer, "n_boot": n_boot, "n_perm": n_perm, "on_progress": on_progress}
    evidence, heads, best_epochs = {}, {}, {}
    for name, scorer in LEARNED_HEADS.items():
        result = train_attention_head([r.hidden[r.content_start:] for r in train], _lengths(train),
                                      [r.hidden[r.content_start:] for r in val], _lengths(val) if val else None,
                                      HeadConfig(epochs=epochs), scorer=scorer,
                                      on_epoch=lambda e, n, _, h=name: on_progress(e, n, f"training the {h} head"))
        evidence[name] = head_evidence(test, result.head, name=name, **options)
        heads[name], best_epochs[name] = (result.head, "attention", 1.0), result.best_epoch
    for name, (head, meta, _) in static.items():
        evidence[f"{name} pooling"] = head_evidence(test, head, name=f"{name} pooling", pooling=meta["pooling"],
                                                    alpha=meta["alpha"], **options)
        heads[f"{name} pooling"] = (head, meta["pooling"], meta["alpha"])
    table = pd.concat([t for t, _ in evidence.values()], ignore_index=True)
    records = table.astype(object).where(table.notna(), None).to_dict("records")  # JSON: no NaN (PostgreSQL)
    return {"table": records, "verdict": verdict(table, EGTP_ATTRIBUTION_R),
            "verdicts": {name: verdict(table, EGTP_ATTRIBUTION_R, name) for name in LEARNED_HEADS},
            "positive_control": positive_control(table),
            "heads": head_summaries(heads, test, reference="mean pooling", n_boot=n_boot),
            "paper_pearson": EGTP_ATTRIBUTION_R, "layer": layer,
            "runs": {s: len(ids) for s, ids in split.items()}, "best_epochs": best_epochs,
            "test_tokens": token_records(test, {name: tokens for name, (_, tokens) in evidence.items()})}


def _rounded(values) -> list[float | None]:
    return [float(f"{v:.4g}") if math.isfinite(v) else None for v in map(float, values)]


def token_records(runs: Sequence[RunArrays], tokens: dict[str, list[RunTokens]]) -> list[dict]:
    """Per test run, what the page draws: ``run_id``, ``output_length``, the pooled ``tokens`` and their
    ``entropy``, and ``importance[head][measure]`` per token (4 significant digits, None for a non-finite value)."""
    records = []
    for i, run in enumerate(runs):
        first = tokens[next(iter(tokens))][i]
        records.append({"run_id": run.run_id, "output_length": run.true_length,
                        "tokens": list(run.tokens[run.content_start:]), "entropy": _rounded(first.entropy),
                        "importance": {head: {m: _rounded(v) for m, v in per_run[i].importance.items()}
                                       for head, per_run in tokens.items()}})
    return records


def _lengths(runs: Sequence[RunArrays]) -> torch.Tensor:
    return torch.tensor([r.true_length for r in runs])


def evidence_row(payload: dict, head: str = ATTENTION_HEAD, measure: str = "gradient",
                 control: str = "raw") -> dict | None:
    """One row of a stored evidence table (default: the learned head's raw gradient r, like for like with the
    paper's), or None if the table has no such row."""
    return next((r for r in payload["table"]
                 if (r["head"], r["measure"], r["control"]) == (head, measure, control)), None)
