"""Which part of the drafter's length gain the draft decoder earns and which its inputs.

The drafter variants (OUTLETS; no decoder: the same fused inputs straight into the heads; LP-only: no draft
loss) are paired with MLP probes that see what the drafter sees (:func:`ablation_probes`), each trained on the
train split's training steps with its epoch chosen on the val split's steps 0..:data:`MAX_STEP`:

* the best single layer at the last position, among the drafter's fused layers and the last layer, chosen on
  validation;
* the fused layers at the last position;
* the fused layers at the last position plus their mean over every position the drafter attends over (pooled);
* the last layer, pooled the same way.

Every comparison is a paired MAE difference on the test split's steps 0..:data:`MAX_STEP` with a bootstrap CI
over prompts (:func:`lenscope.jobs.results.leaderboard.compare_predictors`), read by
:func:`lenscope.analysis.core.verdicts.paired_verdict`. The shares: the **decoder** (no-decoder minus OUTLETS), the
**draft objective** (LP-only minus OUTLETS), the **inputs** (best single-layer probe minus fused pooled probe)
and the **drafter's training** beyond a probe on the same inputs (fused pooled probe minus no-decoder). One
training seed per drafter and probe (a drafter trains for about 45 minutes on 2 CPU cores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import numpy as np

from lenscope.analysis.core.metrics import bootstrap_mae
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.verdicts import paired_verdict
from lenscope.jobs.drafter.training import drafter_name, probe_name, train_probe_job
from lenscope.jobs.results.claims import dataset_predictors
from lenscope.jobs.results.crossval import MAX_STEP, TRAIN_STEPS
from lenscope.jobs.results.leaderboard import compare_predictors
from lenscope.jobs.runs.datasets import predictor_fresh
from lenscope.store.store import Store

ABLATION_KIND = "drafter_ablation"
VARIANTS = ("outlets", "no-decoder", "lp-only")
BEST_LAYER = "best single layer, last position (chosen on validation)"
FUSED_LAST = "fused layers, last position"
FUSED_POOLED = "fused layers, last position + mean over the prefix"
LAST_POOLED = "last layer, last position + mean over the prefix"


def ablation_probes(fuse_layers: Sequence[int], last_layer: int) -> dict[str, tuple[list[int], str]]:
    """Probe label -> (layers, view) of the probes beside the drafter (the best single layer is picked later)."""
    return {FUSED_LAST: (list(fuse_layers), "last"), FUSED_POOLED: (list(fuse_layers), "pooled"),
            LAST_POOLED: ([last_layer], "pooled")}


def _probe(store: Store, dataset: str, layers: list[int], view: str, epochs: int, include_censored: bool,
           on_progress: Progress) -> dict:
    """The registered probe of these layers and view trained with these settings (trained now if missing):
    its ``name``, ``predictor_id`` and validation MAE."""
    name = probe_name(dataset, layers, "regression", view)
    settings = {"epochs": epochs, "include_censored": include_censored, "train_steps": TRAIN_STEPS}
    if not predictor_fresh(store, name, dataset, include_censored, settings):
        result = train_probe_job(store, dataset, layers, epochs=epochs, include_censored=include_censored, view=view,
                                 on_progress=on_progress)
        return {"name": name, "predictor_id": result.predictor_id, "val_mae": result.metrics["val_mae"]}
    row = store.predictors_frame("probe").set_index("name").loc[name]
    return {"name": name, "predictor_id": int(row["predictor_id"]), "val_mae": (row["metrics"] or {}).get("val_mae")}


def _drafters(store: Store, dataset: str) -> dict[str, int | None]:
    """``"<variant> drafter"`` -> the registered drafter's id (None when that variant is not trained)."""
    registered = dataset_predictors(store, dataset)
    return {f"{v} drafter": registered.get(drafter_name(dataset, v)) for v in VARIANTS}


def _test_mae(store: Store, predictor_id: int) -> dict:
    """MAE over the test split's steps 0..MAX_STEP with a bootstrap CI over prompts."""
    rows = store.predictions_frame(predictor_id)
    rows = rows[(rows["split"] == "test") & (rows["step"] <= MAX_STEP)]
    prompts = store.runs_frame().set_index("run_id")["prompt_id"]
    est = bootstrap_mae(rows["predicted"], rows["true"], rows["run_id"].map(prompts))
    return {**asdict(est), "runs": int(rows["run_id"].nunique())}


def _pair(store: Store, ids: dict[str, int], first: str, second: str, share: str | None = None) -> dict | None:
    """``first`` minus ``second`` over the test steps; for a ``share`` (a positive difference is what that part
    earns) the verdict says whether it earns tokens."""
    if first not in ids or second not in ids:
        return None
    row = next(c for c in compare_predictors(store, ids[first], ids[second], MAX_STEP) if c["steps"] != "0")
    labels = (f"{share} costs tokens", f"{share} earns tokens", "not distinguishable") if share else None
    return {**row, "first": first, "second": second, "share": share,
            "verdict": paired_verdict(row["lo"], row["hi"], row["prompts"], *([labels] if labels else []))}


def drafter_ablation(store: Store, dataset: str, last_layer: int, epochs: int = 20, include_censored: bool = False,
                     on_progress: Progress = no_progress) -> dict:
    """Train the probes on the OUTLETS drafter's fused layers and ``last_layer`` (:func:`ablation_probes`, and a
    last-position probe per candidate layer for the best single layer), pair them with the registered drafter
    variants and store the payload (kind :data:`ABLATION_KIND`): ``predictors`` (label -> MAE [CI] on the test
    steps), ``pairs`` (paired differences with verdicts and the share each measures) and ``candidates`` (each
    candidate layer's validation MAE)."""
    drafters = {label: pid for label, pid in _drafters(store, dataset).items() if pid is not None}
    if "outlets drafter" not in drafters:
        raise ValueError(f"no OUTLETS drafter trained on {dataset!r}: `python -m lenscope train-drafter --dataset "
                         f"{dataset}` first (and --variant no-decoder / lp-only for the ablation)")
    predictors = store.predictors_frame("drafter").set_index("predictor_id")
    fuse_layers = list(predictors.loc[drafters["outlets drafter"], "config"]["fuse_layers"])
    candidates = {layer: _probe(store, dataset, [layer], "last", epochs, include_censored, on_progress)
                  for layer in sorted({*fuse_layers, last_layer})}
    best = min(candidates, key=lambda layer: np.inf if candidates[layer]["val_mae"] is None
               else candidates[layer]["val_mae"])
    probes = {BEST_LAYER: candidates[best]}
    probes.update({label: _probe(store, dataset, layers, view, epochs, include_censored, on_progress)
                   for label, (layers, view) in ablation_probes(fuse_layers, last_layer).items()})
    ids = {**drafters, **{label: p["predictor_id"] for label, p in probes.items()}}
    config = {"dataset": dataset, "predictors": ids, "max_step": MAX_STEP}
    return store.memo(ABLATION_KIND, config, lambda: _ablation_payload(store, ids, probes, candidates, best,
                                                                       fuse_layers, last_layer, epochs),
                      name=f"drafter ablation {dataset}")


def _ablation_payload(store: Store, ids: dict, probes: dict, candidates: dict, best: int, fuse_layers: list,
                      last_layer: int, epochs: int) -> dict:
    pairs = [_pair(store, ids, "outlets drafter", label) for label in probes]
    pairs += [_pair(store, ids, "no-decoder drafter", "outlets drafter", "the draft decoder"),
              _pair(store, ids, "lp-only drafter", "outlets drafter", "the draft (KL) objective"),
              _pair(store, ids, BEST_LAYER, FUSED_POOLED, "the drafter's inputs, to a probe"),
              _pair(store, ids, FUSED_POOLED, "no-decoder drafter", "the drafter's training beyond a probe on its "
                                                                  "inputs")]
    return {"predictors": {label: _test_mae(store, pid) for label, pid in ids.items()},
            "names": {label: p["name"] for label, p in probes.items()},
            "pairs": [p for p in pairs if p is not None], "best_layer": best,
            "candidates": {str(layer): c["val_mae"] for layer, c in candidates.items()},
            "fuse_layers": list(fuse_layers), "last_layer": last_layer, "epochs": epochs}


def stored_ablation(store: Store, dataset: str) -> dict | None:
    """The newest stored ablation of ``dataset`` that read the drafters registered now (nothing is computed)."""
    drafters = _drafters(store, dataset)
    stored = store.results_frame(ABLATION_KIND)  # newest first
    for config, payload in zip(stored["config"], stored["payload"]):
        if config["dataset"] == dataset and all(config["predictors"].get(label) == pid
                                                for label, pid in drafters.items()):
            return payload
    return None
