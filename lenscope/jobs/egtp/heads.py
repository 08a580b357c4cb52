"""EGTP jobs over the store: cached pooled features, static heads per pooling, PLP, attribution.

Every job reads runs of a dataset from the store, caches what is expensive (per-run pooled features as
content-addressed tensors, trained heads as safetensors artifacts, predictions and result tables in the
database) and reports progress through ``on_progress(done, total, label)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd
import torch

from lenscope.analysis.core.metrics import bootstrap_mae, mae_by_step, paired_mae_difference, prediction_metrics
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.soft_label_head import SoftLabelHead
from lenscope.analysis.egtp.attribution import (
    entropy_importance_correlation,
    model_importance,
    pooled_importance,
)
from lenscope.analysis.egtp.plp import EVAL_STEPS, plp_inputs, plp_steps, remaining_frame
from lenscope.analysis.egtp.pooling import POOLINGS
from lenscope.analysis.egtp.training import HeadConfig, HeadTask, load_head, predict, save_head, train_head, train_heads
from lenscope.analysis.papers import EGTP_ATTRIBUTION_R
from lenscope.jobs.predictors.artifacts import with_artifact_hashes
from lenscope.jobs.runs.datasets import dataset_runs, require_every_step
from lenscope.jobs.runs.features import run_features
from lenscope.jobs.runs.generate import GenerationSettings, generate_cached
from lenscope.models.target import TargetModel
from lenscope.store.settings import get_settings
from lenscope.store.store import Store, StoredRun

ABLATION_KIND, ATTRIBUTION_KIND = "egtp_pooling_ablation", "egtp_attribution"
STATIC_KIND, PLP_KIND = "egtp_static", "egtp_plp"
DEFAULT_LAYER = 30


@dataclass
class FeatureTable:
    """Runs of a dataset (frame with run_id, prompt_id, scenario, output_tokens, split) and their features."""

    runs: pd.DataFrame
    features: dict[int, dict[str, torch.Tensor]]

    def prompt_matrix(self, pooling: str) -> torch.Tensor:
        return torch.stack([self.features[r][f"prompt.{pooling}"] for r in self.runs["run_id"]])

    def lengths(self) -> torch.Tensor:
        return torch.tensor(self.runs["output_tokens"].to_numpy(), dtype=torch.float32)


def feature_table(store: Store, dataset: str, layer: int = DEFAULT_LAYER, alpha: float = 1.0,
                  include_censored: bool = False, on_progress: Progress = no_progress) -> FeatureTable:
    """Features of the runs of ``dataset`` (censored ones only when asked) with their task-level split."""
    runs = dataset_runs(store, dataset, include_censored)
    feats = {}
    for i, run_id in enumerate(runs["run_id"]):
        feats[int(run_id)] = run_features(store, int(run_id), layer, alpha)
        on_progress(i + 1, len(runs), "pooling features")
    return FeatureTable(runs, feats)


def _check_splits(table: FeatureTable) -> None:
    counts = table.runs["split"].value_counts()
    if counts.get("train", 0) < 2 or counts.get("test", 0) < 1:
        raise ValueError(f"need at least 2 train and 1 test runs, have {counts.to_dict()}; collect more runs")


def predictor_name(kind: str, dataset: str, layer: int, pooling: str = "egtp") -> str:
    return f"{kind}-{pooling}-{dataset}-L{layer}"


def _artifact(name: str):
    return get_settings().artifact_path("egtp", name, ".safetensors")


def train_static(store: Store, dataset: str, poolings: Sequence[str] = POOLINGS, layer: int = DEFAULT_LAYER,
                 alpha: float = 1.0, config: HeadConfig | None = None, include_censored: bool = False,
                 on_progress: Progress = no_progress) -> pd.DataFrame:
    """Train one static soft-label head per pooling; store heads, predictions and the ablation table
    (runs cut at the token cap only with ``include_censored``).

    Returns the ablation table (pooling, scenario, mae, n) on the test split, 'all' rows included.
    """
    store.require_writable(f"training the static heads on {dataset!r}")  # before any work, not after it
    cfg = config or HeadConfig()
    bad = sorted(set(poolings) - set(POOLINGS))
    if bad:
        raise ValueError(f"unknown pooling {bad}; choose from {POOLINGS}")
    payload = store.memo(ABLATION_KIND, ablation_config(dataset, layer, alpha),
                         lambda: _static_heads(store, dataset, poolings, layer, alpha, cfg, include_censored,
                                               on_progress),
                         name=f"pooling ablation {dataset} L{layer}", refresh=True)
    return pd.DataFrame(payload["rows"])


def stored_pooling_ablation(store: Store, dataset: str, layer: int = DEFAULT_LAYER, alpha: float = 1.0) -> dict | None:
    """The pooling ablation :func:`train_static` kept for ``dataset`` at ``layer`` and ``alpha``, or None."""
    return store.stored(ABLATION_KIND, ablation_config(dataset, layer, alpha))


def _static_heads(store: Store, dataset: str, poolings: Sequence[str], layer: int, alpha: float, cfg: HeadConfig,
                  include_censored: bool, on_progress: Progress) -> dict:
    """Train the heads of :func:`train_static` and return the ablation payload it keeps."""
    table = feature_table(store, dataset, layer, alpha, include_censored, on_progress)
    _check_splits(table)
    runs, y = table.runs, table.lengths()
    masks = {s: torch.tensor((runs["split"] == s).to_numpy()) for s in ("train", "val", "test")}
    dataset_id = store.dataset_id(dataset)
    rows, test_predictions = [], {}
    xs = {pooling: table.prompt_matrix(pooling) for pooling in poolings}
    label = f"train {', '.join(poolings)}" + (" side by side" if len(poolings) > 1 else "")
    results = train_heads([HeadTask(x[masks["train"]], y[masks["train"]], x[masks["val"]], y[masks["val"]], cfg,
                                    (lambda e, n, row: on_progress(e, n, label)) if k == 0 else None)
                           for k, x in enumerate(xs.values())])
    for (pooling, x), res in zip(xs.items(), results):
        frame = runs[["run_id", "prompt_id", "split", "scenario"]].assign(step=0, predicted=predict(res.head, x),
                                                                         true=y.numpy())
        name = predictor_name(STATIC_KIND, dataset, layer, pooling)
        meta = {"pooling": pooling, "layer": layer, "alpha": alpha, "dataset": dataset, "head": asdict(cfg),
                "include_censored": include_censored}
        path = save_head(res.head, _artifact(name), meta)
        metrics = {**prediction_metrics(frame), "best_epoch": res.best_epoch}
        pid = store.save_predictor(name, STATIC_KIND, with_artifact_hashes(meta, path), metrics, str(path),
                                   dataset_id=dataset_id)
        store.save_predictions(pid, frame)
        test = frame[frame["split"] == "test"]
        test_predictions[pooling] = test
        rows += [{"pooling": pooling, "scenario": s, **_ci_row(g)}
                 for s, g in [("all", test), *test.groupby("scenario")]]
    ablation = pd.DataFrame(rows)
    test = next(iter(test_predictions.values()))
    constant = float(y[masks["train"]].median())
    return {"rows": ablation.to_dict("records"), "head": asdict(cfg),
            "constant_mae": metrics.get("constant_static_mae"),
            "constant": {**_ci_row(test.assign(predicted=constant))},
            "paired": _paired_rows(test_predictions, constant),
            "head_variants": _head_variants(table, masks, cfg, test_predictions.get("egtp"), on_progress)}


# Head options compared on EGTP pooling: the paper's lambda = 0.95 against CE only, log against linear bins,
# and the architecture a public reimplementation note quotes for the official code (unverified).
HEAD_VARIANTS = {"lambda = 1.0 (CE only)": {"lam": 1.0}, "linear bins": {"bins_kind": "linear"},
                 "official head (p1-p99 bins)": {"architecture": "official", "bins_kind": "p1-p99"}}


def _ci_row(test: pd.DataFrame) -> dict:
    est = bootstrap_mae(test["predicted"], test["true"], test["prompt_id"])
    return {"mae": est.value, "mae_lo": est.lo, "mae_hi": est.hi, "n": len(test), "prompts": est.n}


def _paired_rows(test_predictions: dict[str, pd.DataFrame], constant: float) -> list[dict]:
    """EGTP against every other pooling and each pooling against the constant train median, paired on the same
    test runs (negative difference: the first is better)."""
    out = []
    pairs = [("egtp", other) for other in test_predictions if other != "egtp" and "egtp" in test_predictions]
    pairs += [(p, "constant") for p in test_predictions]
    for first, second in pairs:
        a = test_predictions[first]
        b = np.full(len(a), constant) if second == "constant" else test_predictions[second]["predicted"]
        diff = paired_mae_difference(a["predicted"], b, a["true"], a["prompt_id"])
        out.append({"comparison": f"{first} - {second}", "difference": diff.value, "lo": diff.lo, "hi": diff.hi,
                    "prompts": diff.n})
    return out


def _head_variants(table: FeatureTable, masks: dict, cfg: HeadConfig, egtp_test: pd.DataFrame | None,
                   on_progress: Progress) -> list[dict]:
    """Test MAE of each :data:`HEAD_VARIANTS` head on EGTP-pooled prompts, paired against the default head."""
    if egtp_test is None:
        return []
    x, y = table.prompt_matrix("egtp"), table.lengths()
    out = [{"variant": "default (lambda = 0.95, log bins, MLP)", **_ci_row(egtp_test)}]
    for k, (name, overrides) in enumerate(HEAD_VARIANTS.items()):
        res = train_head(x[masks["train"]], y[masks["train"]], x[masks["val"]], y[masks["val"]],
                         replace(cfg, **overrides))
        test = egtp_test.assign(predicted=predict(res.head, x[masks["test"]]))
        diff = paired_mae_difference(test["predicted"], egtp_test["predicted"], test["true"], test["prompt_id"])
        out.append({"variant": name, **_ci_row(test), "vs_default": diff.value, "vs_lo": diff.lo,
                    "vs_hi": diff.hi})
        on_progress(k + 1, len(HEAD_VARIANTS), "head variants")
    return out


def ablation_config(dataset: str, layer: int = DEFAULT_LAYER, alpha: float = 1.0) -> dict:
    return {"dataset": dataset, "layer": layer, "alpha": alpha}


def load_predictor(store: Store, kind: str, name: str) -> tuple[SoftLabelHead, dict, int]:
    """(head, meta, predictor_id) of a stored predictor; ValueError naming the command that creates it."""
    frame = store.predictors_frame(kind)
    row = frame[frame["name"] == name]
    if row.empty:
        cmd = "train-plp" if kind == PLP_KIND else "train-egtp"
        raise ValueError(f"no trained predictor {name!r}; run `python -m lenscope {cmd}` first")
    head, meta = load_head(row["artifact_path"].iloc[0])
    return head, meta, int(row["predictor_id"].iloc[0])


def plp_samples(table: FeatureTable, run_ids: Sequence[int], max_step: int | None = None,
                prompt_pooling: str = "egtp") -> tuple[torch.Tensor, pd.DataFrame]:
    """PLP inputs and sample rows (run_id, step, true) of ``run_ids`` at steps 0..L-1 (or ..max_step)."""
    xs, frames = [], []
    lengths = dict(zip(table.runs["run_id"], table.runs["output_tokens"]))
    for rid in run_ids:
        f = table.features[int(rid)]
        rows = remaining_frame(int(rid), int(lengths[rid]), max_step)
        xs.append(plp_inputs(f[f"prompt.{prompt_pooling}"], f["generated.egtp"], rows["step"].to_numpy()))
        frames.append(rows)
    return torch.cat(xs), pd.concat(frames, ignore_index=True)


def train_plp(store: Store, dataset: str, layer: int = DEFAULT_LAYER, alpha: float = 1.0,
              config: HeadConfig | None = None, include_censored: bool = False,
              on_progress: Progress = no_progress) -> pd.DataFrame:
    """Train the PLP head over every decoding step of the training runs; store it and its predictions at
    steps 0..32 for every split (runs cut at the token cap only with ``include_censored``). Returns the test
    MAE by step (step, mae, n)."""
    store.require_writable(f"training PLP on {dataset!r}")  # before any work, not after it
    cfg = config or HeadConfig(epochs=15, batch_size=64)
    if include_censored:
        require_every_step(dataset_runs(store, dataset, include_censored), "PLP training on censored runs")
    table = feature_table(store, dataset, layer, alpha, include_censored, on_progress)
    _check_splits(table)
    runs = table.runs
    ids = {s: runs.loc[runs["split"] == s, "run_id"].tolist() for s in ("train", "val", "test")}
    x_tr, s_tr = plp_samples(table, ids["train"])
    x_val, s_val = plp_samples(table, ids["val"], EVAL_STEPS) if ids["val"] else (None, None)
    res = train_head(x_tr, torch.tensor(s_tr["true"].to_numpy(), dtype=torch.float32), x_val,
                     None if s_val is None else torch.tensor(s_val["true"].to_numpy(), dtype=torch.float32),
                     cfg, lambda e, n, row: on_progress(e, n, "train plp"))
    x_all, frame = plp_samples(table, runs["run_id"].tolist(), EVAL_STEPS)
    frame = frame.merge(runs[["run_id", "prompt_id", "split", "scenario"]], on="run_id")
    frame["predicted"] = predict(res.head, x_all)
    name = predictor_name(PLP_KIND, dataset, layer)
    meta = {"layer": layer, "alpha": alpha, "dataset": dataset, "prompt_pooling": "egtp",
            "generated_summary": "egtp", "head": asdict(cfg), "include_censored": include_censored}
    path = save_head(res.head, _artifact(name), meta)
    curve = mae_by_step(frame[frame["split"] == "test"], EVAL_STEPS)
    metrics = {**prediction_metrics(frame), "best_epoch": res.best_epoch,
               "test_mae_by_step": curve.to_dict("records")}
    dataset_id = store.dataset_id(dataset)
    pid = store.save_predictor(name, PLP_KIND, with_artifact_hashes(meta, path), metrics, str(path),
                               dataset_id=dataset_id)
    store.save_predictions(pid, frame[["run_id", "step", "predicted", "true", "split"]])
    return curve


def plp_trajectory(store: Store, head: SoftLabelHead, meta: dict, run: StoredRun) -> pd.DataFrame:
    """Predicted vs true remaining length after every step of one run (step, predicted, true); a run whose features
    stop early (:attr:`~lenscope.store.store.StoredRun.features_cut`) has the steps they reach."""
    f = run_features(store, run.id, meta["layer"], meta["alpha"])
    steps = plp_steps(min(run.output_length, len(f["generated.egtp"]) + 1))
    x = plp_inputs(f[f"prompt.{meta['prompt_pooling']}"], f["generated.egtp"], steps)
    return pd.DataFrame({"step": steps, "predicted": predict(head, x), "true": run.output_length - steps})


def plp_mae_curve(store: Store, predictor_id: int, split: str = "test") -> pd.DataFrame:
    """MAE by observed steps (0..32) of a stored PLP predictor on one split."""
    preds = store.predictions_frame(predictor_id)
    return mae_by_step(preds[preds["split"] == split], EVAL_STEPS)


def attribution_config(dataset: str, layer: int, attr_layer: int, alpha: float) -> dict:
    return {"dataset": dataset, "layer": layer, "attr_layer": attr_layer, "alpha": alpha}


def token_attribution(head: SoftLabelHead, meta: dict, run: StoredRun, attr_layer: int, model=None) -> np.ndarray:
    """Importance of every pooled prompt token of ``run`` (the user's content and the assistant header,
    positions ``content_start..prompt_len``) for ``head``: the pooling path when ``attr_layer`` is the head's
    layer (no model needed), else the model path through ``model``'s layers."""
    c, p, layer, pooling, alpha = run.content_start, run.prompt_len, meta["layer"], meta["pooling"], meta["alpha"]
    entropy = run.features.entropy[:p]
    if attr_layer == layer:
        return pooled_importance(head, run.features.hidden[layer][c:p], entropy[c:p], run.output_length,
                                 pooling, alpha).numpy()
    if model is None:
        raise ValueError("attribution below the head layer needs the target model")
    return model_importance(model, run.features.input_ids[:p], head, entropy, run.output_length, layer,
                            attr_layer, pooling, alpha, start=c).numpy()[c:]


def run_attribution(store: Store, dataset: str, layer: int = DEFAULT_LAYER, attr_layer: int | None = None,
                    alpha: float = 1.0, model=None, heads: Sequence[str] = ("egtp", "mean"),
                    n_boot: int = 1000, include_censored: bool = False, on_progress: Progress = no_progress) -> dict:
    """Entropy-importance correlation over the test prompts for the stored static heads ``heads``.

    ``attr_layer`` defaults to ``layer`` (pooling path); a lower layer needs ``model`` (model path).
    Stores and returns a payload with one summary per head and per-run token arrays for the page.
    """
    attr_layer = layer if attr_layer is None else attr_layer
    return store.memo(ATTRIBUTION_KIND, attribution_config(dataset, layer, attr_layer, alpha),
                      lambda: _attribution_payload(store, dataset, layer, attr_layer, model, heads, n_boot,
                                                   include_censored, on_progress),
                      name=f"attribution {dataset} L{layer}<-L{attr_layer}", refresh=True)


def stored_attribution(store: Store, dataset: str, layer: int, attr_layer: int, alpha: float) -> dict | None:
    """The attribution :func:`run_attribution` kept for these settings, or None (nothing is computed)."""
    return store.stored(ATTRIBUTION_KIND, attribution_config(dataset, layer, attr_layer, alpha))


def _attribution_payload(store: Store, dataset: str, layer: int, attr_layer: int, model, heads: Sequence[str],
                         n_boot: int, include_censored: bool, on_progress: Progress) -> dict:
    loaded = {h: load_predictor(store, STATIC_KIND, predictor_name(STATIC_KIND, dataset, layer, h)) for h in heads}
    runs = dataset_runs(store, dataset, include_censored)
    test = runs[runs["split"] == "test"]
    if test.empty:
        raise ValueError(f"dataset {dataset!r} has no test runs yet")
    per_run = []
    for i, rid in enumerate(test["run_id"]):
        run = store.load_run(int(rid), layers=[layer])
        c, p = run.content_start, run.prompt_len
        row = {"run_id": int(rid), "tokens": run.features.tokens[c:p],
               "entropy": run.features.entropy[c:p].tolist(), "output_length": run.output_length}
        for h, (head, meta, _) in loaded.items():
            row[f"importance_{h}"] = token_attribution(head, meta, run, attr_layer, model).tolist()
        per_run.append(row)
        on_progress(i + 1, len(test), "attribution")
    summaries = [{"head": h, "path": "pooling" if attr_layer == layer else "model",
                  "predictor_id": loaded[h][2],
                  **entropy_importance_correlation([(r["entropy"], r[f"importance_{h}"]) for r in per_run],
                                                   n_boot).as_dict()} for h in heads]
    return {"summaries": summaries, "runs": per_run, "paper_pearson": EGTP_ATTRIBUTION_R}


def attribution_job(store: Store, dataset: str, layer: int, attr_layer: int, alpha: float,
                    target: TargetModel | None, on_progress: Progress = no_progress) -> dict:
    """:func:`run_attribution`, training the static heads first when they are missing (the model path,
    ``attr_layer`` below ``layer``, needs ``target``)."""
    if stored_pooling_ablation(store, dataset, layer, alpha) is None:
        train_static(store, dataset, layer=layer, alpha=alpha, on_progress=on_progress)
    model = target.model if target is not None and attr_layer < layer else None
    return run_attribution(store, dataset, layer, attr_layer, alpha, model, on_progress=on_progress)


@dataclass
class PromptAttribution:
    """Importance of each token of a typed prompt for one stored head, with the answer's true length."""

    tokens: list[str]
    entropy: list[float]
    importance: list[float]
    output_length: int


def attribute_prompt(store: Store, target: TargetModel, dataset: str, layer: int, attr_layer: int, head_name: str,
                     prompt: str,
                     settings: GenerationSettings = GenerationSettings(256, 0.7, 1.0, 0)) -> PromptAttribution:
    """Generate (or reuse) the answer to ``prompt`` and attribute the static ``head_name`` head to its tokens."""
    head, meta, _ = load_predictor(store, STATIC_KIND, predictor_name(STATIC_KIND, dataset, layer, head_name))
    run, _ = generate_cached(store, target, prompt, settings,
                             sorted(set(target.default_layers()) | {layer, attr_layer}))
    run = store.load_run(run.id, layers=[layer])
    c, p = run.content_start, run.prompt_len
    importance = token_attribution(head, meta, run, attr_layer, target.model)
    return PromptAttribution(run.features.tokens[c:p], run.features.entropy[c:p].tolist(), importance.tolist(),
                             run.output_length)
