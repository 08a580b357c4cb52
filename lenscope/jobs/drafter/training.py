"""Jobs behind ``train-drafter`` / ``train-probe`` and the Drafter-vs-target page: load stored runs,
train, predict, evaluate, and register predictors, predictions and UMAP embeddings in the store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lenscope.analysis.core.metrics import prediction_metrics
from lenscope.analysis.core.progress import Progress, no_progress, with_details
from lenscope.analysis.core.splits import evaluation_split
from lenscope.analysis.drafter.acceptance import DRAFT_STEPS
from lenscope.analysis.drafter.probes import (
    ProbeConfig,
    remaining_length_samples,
    step_features,
    train_probe,
)
from lenscope.analysis.drafter.training import (
    DRAFT_VOCAB_SIZE,
    LENGTH_WINDOW,
    VARIANTS,
    DrafterExample,
    bf16_native,
    default_ttt_steps,
    get_variant,
    predict_example,
    train_drafter,
)
from lenscope.analysis.egtp.plp import plp_steps, training_steps
from lenscope.jobs.predictors.artifacts import with_artifact_hashes
from lenscope.jobs.results.crossval import MAX_STEP, TRAIN_STEPS
from lenscope.jobs.runs.datasets import JobResult, dataset_runs, require_every_step
from lenscope.jobs.runs.target_topk import TOPK, run_target_topk
from lenscope.models.drafter import LENGTH_MODES, Drafter
from lenscope.models.target import TargetModel
from lenscope.store.settings import get_settings
from lenscope.store.store import Store, StoredRun

DRAFTER_VARIANTS = tuple(VARIANTS)  # every variant the app and CLI can train
# The variants beside the OUTLETS drafter in the study's drafter ablation.
ABLATION_DRAFTERS = ("no-decoder", "lp-only", "sd-only")
PROBE_MODES = LENGTH_MODES
UMAP_KIND = "drafter_umap"


def example_from_run(run: StoredRun, fuse_layers: Sequence[int], split: str,
                     topk: tuple[torch.Tensor, torch.Tensor] | None = None) -> DrafterExample:
    """A drafter example from a stored run, with the target's top-k next-token distributions ``topk`` (from
    :func:`run_target_topk`; needed for training and acceptance, not for prediction)."""
    missing = [layer for layer in fuse_layers if layer not in run.features.hidden]
    if missing:
        raise ValueError(f"run {run.id} has no stored hidden states for layers {missing}")
    ids, logp = topk or (torch.zeros(len(run.features), 0, dtype=torch.long), torch.zeros(len(run.features), 0))
    return DrafterExample(run_id=run.id, prompt_id=run.prompt_id, split=split, prompt_len=run.prompt_len,
                          output_length=run.output_length, input_ids=run.features.input_ids.long(),
                          hidden=[run.features.hidden[layer].half() for layer in fuse_layers],
                          target_ids=ids, target_logp=logp.half())


def load_examples(store: Store, target: TargetModel | None, dataset: str, fuse_layers: Sequence[int],
                  on_progress: Progress = no_progress, include_censored: bool = False) -> list[DrafterExample]:
    """Every run of ``dataset`` with at least one generated token, as drafter examples (with the
    target's top-k distributions when ``target`` is given)."""
    runs = dataset_runs(store, dataset, include_censored)
    if include_censored:
        require_every_step(runs, "drafter training on censored runs")
    runs = runs[runs["output_tokens"] > 0]
    examples = []
    for i, row in enumerate(runs.itertuples()):
        run = store.load_run(int(row.run_id), layers=fuse_layers)
        topk = run_target_topk(store, target, run) if target is not None else None
        examples.append(example_from_run(run, fuse_layers, row.split, topk))
        on_progress(i + 1, len(runs), "loading runs")
    return examples


def drafter_name(dataset: str, variant: str) -> str:
    return f"drafter:{dataset}:{variant}"


def drafter_settings(target: TargetModel, ttt_steps: int | None = None,
                      draft_vocab_size: int = DRAFT_VOCAB_SIZE) -> dict:
    """The drafter settings a registered drafter must have been trained with to be current: training-time-test
    steps (default: :func:`default_ttt_steps` of the target's device) and the draft vocabulary size (0: full)."""
    steps = default_ttt_steps(target.device.type) if ttt_steps is None else ttt_steps
    if steps < 1:
        raise ValueError(f"ttt_steps must be at least 1, got {steps}")
    return {"ttt_steps": steps, "draft_vocab_size": min(draft_vocab_size, int(target.config.vocab_size))}


def train_drafter_job(store: Store, target: TargetModel, dataset: str = "dev", variant: str = "outlets",
                      epochs: int = 6, lr: float = 1e-3, max_step: int = 128, seed: int = 0,
                      include_censored: bool = False, ttt_steps: int | None = None,
                      draft_vocab_size: int = DRAFT_VOCAB_SIZE, on_progress: Progress = no_progress) -> JobResult:
    """Train one drafter variant on the train split of ``dataset`` on the target's device (training-time test
    over ``ttt_steps`` drafting steps, see :func:`drafter_settings`), predict every run's remaining length at
    steps 0..max_step, save and register it (its acceptance is measured live, by :mod:`lenscope.jobs.drafter.live`)."""
    store.require_writable(f"training the {variant} drafter on {dataset!r}")  # before any work, not after it
    spec = get_variant(variant)
    settings = drafter_settings(target, ttt_steps, draft_vocab_size)
    torch.manual_seed(seed)
    drafter = Drafter.for_target(target, **spec.drafter_overrides(), draft_vocab_size=settings["draft_vocab_size"])
    examples = load_examples(store, target, dataset, drafter.config.fuse_layers, on_progress, include_censored)
    train = [ex for ex in examples if ex.split == "train"]
    if not train:
        raise ValueError(f"dataset {dataset!r} has no training runs to fit a drafter on; collect more prompts")
    history = train_drafter(drafter, train, spec, epochs=epochs, lr=lr, seed=seed, ttt_steps=settings["ttt_steps"],
                            device=target.device,
                            on_step=lambda s, n, parts: on_progress(s, n, with_details("training",
                                                                                          f"loss {parts['loss']:.3f}")))
    frames = []
    for i, ex in enumerate(examples):
        frames.append(predict_example(drafter, ex, max_step)[0])
        on_progress(i + 1, len(examples), "predicting")
    predictions = pd.concat(frames, ignore_index=True)
    prompts = {ex.run_id: ex.prompt_id for ex in examples}
    metrics = {**prediction_metrics(predictions.assign(prompt_id=predictions["run_id"].map(prompts))),
               "history": history,
               "train_runs": len(train), "runs": len(examples)}
    name = drafter_name(dataset, variant)
    path = drafter.save(get_settings().artifact_path("drafters", name))
    config = {"dataset": dataset, "variant": variant, "epochs": epochs, "lr": lr, "max_step": max_step,
              "seed": seed, "topk": TOPK, "draft_steps": DRAFT_STEPS, "length_window": LENGTH_WINDOW,
              "bf16_autocast": bf16_native(target.device),
              **spec.drafter_overrides(), "fuse_layers": drafter.config.fuse_layers,
              "include_censored": include_censored, **settings}
    pid = store.save_predictor(name, "drafter", with_artifact_hashes(config, path), metrics, str(path),
                               store.ensure_model(target), store.dataset_id(dataset))
    store.save_predictions(pid, predictions)
    return JobResult(pid, name, metrics)


def probe_name(dataset: str, layers: int | Sequence[int], mode: str, view: str = "last") -> str:
    """``probe:DATASET:L15:regression`` (one layer's last state); other layers and views add to it, e.g.
    ``probe:DATASET:L2+15+27:regression:pooled``."""
    layers = [layers] if isinstance(layers, int) else list(layers)
    return f"probe:{dataset}:L{'+'.join(map(str, layers))}:{mode}" + ("" if view == "last" else f":{view}")


def probe_samples(run: StoredRun, layer: int, max_step: int | None) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Hidden states of ``layer`` at the last visible position of each step, steps and remaining lengths."""
    samples = remaining_length_samples(run.prompt_len, run.output_length, max_step)
    return run.features.hidden[layer][torch.as_tensor(samples.positions)], samples.steps, samples.remaining


def train_probe_job(store: Store, dataset: str = "dev", layer: int | Sequence[int] = 15, mode: str = "regression",
                    epochs: int = 30, max_step: int = 128, seed: int = 0, include_censored: bool = False,
                    view: str = "last", on_progress: Progress = no_progress) -> JobResult:
    """Train a TRAIL-style MLP probe on target states (:func:`lenscope.analysis.drafter.probes.step_features` of
    ``layer``, one or several, in ``view``) on the train split's :data:`TRAIN_STEPS` (every step up to :data:`MAX_STEP`
    and later ones spread further), keep the epoch (up to ``epochs``) with the lowest validation MAE over steps
    0..:data:`MAX_STEP` of the val split, predict steps 0..``max_step`` of every run and register it (kind
    ``probe``)."""
    store.require_writable(f"training a probe on {dataset!r}")  # before any work, not after it
    layers = [layer] if isinstance(layer, int) else list(layer)
    runs = dataset_runs(store, dataset, include_censored)
    if include_censored:
        require_every_step(runs, "probe training on censored runs")
    runs = runs[runs["output_tokens"] > 0]
    if not (runs["split"] == "train").any():
        raise ValueError(f"dataset {dataset!r} has no training runs to fit a probe on; collect more prompts")
    rows = []
    for i, row in enumerate(runs.itertuples()):
        run = store.load_run(int(row.run_id), layers=layers)
        missing = [lay for lay in layers if lay not in run.features.hidden]
        if missing:
            raise ValueError(f"run {run.id} has no stored hidden states for layers {missing}")
        steps, fits = plp_steps(run.output_length, max_step), None  # every run is predicted at steps 0..max_step
        if row.split == "train":  # ... and a training run trains on its TRAIN_STEPS
            trained = training_steps(run.output_length, **TRAIN_STEPS)
            steps = np.union1d(steps, trained)
            fits = np.isin(steps, trained)
        elif row.split == "val":
            fits = steps <= MAX_STEP
        feats = step_features([run.features.hidden[lay] for lay in layers], run.prompt_len - 1 + steps, view)
        rows.append((run.id, row.split, feats.half(), steps, run.output_length - steps, fits))
        on_progress(i + 1, len(runs), "loading runs")

    def samples(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The features and remaining lengths a ``split`` run trains (train) or validates (val) the probe on."""
        picked = [(feats[torch.as_tensor(fits)], rem[fits]) for _, s, feats, _, rem, fits in rows if s == split]
        if not picked:
            return torch.zeros(0, rows[0][2].shape[1]), torch.zeros(0)
        return torch.cat([f for f, _ in picked]), torch.as_tensor(np.concatenate([r for _, r in picked]))

    x, remaining = samples("train")
    config = ProbeConfig(in_dim=x.shape[1], layer=layers[-1], mode=mode)
    probe = train_probe(x, remaining, config, epochs=epochs, seed=seed,
                        val=samples("val"),
                        on_epoch=lambda e, loss: on_progress(e, epochs, with_details("training", f"loss {loss:.3f}")))
    frames = []
    for run_id, split, feats, steps, rem, _ in rows:
        keep = steps <= max_step
        frames.append(pd.DataFrame({"run_id": run_id, "step": steps[keep],
                                    "predicted": probe.predict(feats[torch.as_tensor(keep)]).numpy(),
                                    "true": rem[keep], "split": split}))
    predictions = pd.concat(frames, ignore_index=True)
    prompts = runs.set_index("run_id")["prompt_id"]
    metrics = {**prediction_metrics(predictions.assign(prompt_id=predictions["run_id"].map(prompts))),
               "train_samples": len(x), "best_epoch": probe.best_epoch, "history": probe.history,
               "val_mae": min((h["val"] for h in probe.history if "val" in h), default=None)}
    name = probe_name(dataset, layers, mode, view)
    path = probe.save(get_settings().artifact_path("probes", name))
    row = {"dataset": dataset, "layer": layers[-1], "layers": layers, "view": view, "mode": mode, "epochs": epochs,
           "max_step": max_step, "seed": seed, "include_censored": include_censored, "train_steps": TRAIN_STEPS}
    pid = store.save_predictor(name, "probe", with_artifact_hashes(row, path), metrics, str(path),
                               int(runs["model_id"].iloc[0]), store.dataset_id(dataset))
    store.save_predictions(pid, predictions)
    return JobResult(pid, name, metrics)


def load_drafter(artifact_path: str, target: TargetModel) -> Drafter:
    """A registered drafter's weights, on top of ``target``."""
    return Drafter.load_for_target(Path(artifact_path), target)


def step_predictions(store: Store, predictors: pd.DataFrame, names: Sequence[str],
                     evaluation_only: bool = True) -> dict[str, pd.DataFrame]:
    """Stored per-step predictions of the named predictors, on their evaluation split unless told otherwise."""
    frames = {}
    for name in names:
        row = predictors[predictors["name"] == name].iloc[0]
        frame = store.predictions_frame(int(row["predictor_id"]))
        if evaluation_only:
            frame = frame[frame["split"] == (row["metrics"] or {}).get("eval_split", "test")]
        frames[name] = frame
    return frames


def umap_config(predictor_id: int, layer: int, n_points: int) -> dict:
    return {"predictor_id": predictor_id, "layer": layer, "n_points": n_points}


def representation_umap_job(store: Store, target: TargetModel, predictor_id: int, layer: int = 15,
                            n_points: int = 1500, seed: int = 0, on_progress: Progress = no_progress) -> dict:
    """2-D UMAP of drafter representations and of target layer-``layer`` states at the same decoding
    steps (evaluation-split runs, up to ``n_points`` evenly subsampled), coloured by remaining length.
    Kept in the store as a ``drafter_umap`` result (computed again, and replaced, on every call)."""
    row = store.predictors_frame("drafter").set_index("predictor_id").loc[predictor_id]
    payload = store.memo(UMAP_KIND, umap_config(predictor_id, layer, n_points),
                         lambda: _umap_payload(store, target, row, layer, n_points, seed, on_progress),
                         name=f"UMAP {row['name']} vs layer {layer}", refresh=True)
    on_progress(2, 2, "UMAP done")
    return payload


def stored_umap(store: Store, predictor_id: int, layer: int = 15, n_points: int = 1500) -> dict | None:
    """The UMAP payload kept for drafter ``predictor_id`` against target layer ``layer``, or None (nothing is
    computed)."""
    return store.stored(UMAP_KIND, umap_config(predictor_id, layer, n_points))


def _umap_payload(store: Store, target: TargetModel, row: pd.Series, layer: int, n_points: int, seed: int,
                  on_progress: Progress) -> dict:
    import umap

    drafter = load_drafter(row["artifact_path"], target)
    examples = load_examples(store, None, row["config"]["dataset"], drafter.config.fuse_layers, on_progress)
    split = evaluation_split(ex.split for ex in examples)
    reps, states, remaining, steps = [], [], [], []
    for ex in (ex for ex in examples if ex.split == split):
        frame, feats = predict_example(drafter, ex, row["config"].get("max_step"))
        run = store.load_run(ex.run_id, layers=[layer])
        reps.append(feats)
        states.append(probe_samples(run, layer, row["config"].get("max_step"))[0])
        remaining.append(frame["true"].to_numpy())
        steps.append(frame["step"].to_numpy())
    pick = np.linspace(0, sum(len(r) for r in remaining) - 1, min(n_points, sum(len(r) for r in remaining))).astype(int)
    embeddings = {}
    for i, (key, feats) in enumerate((("drafter", reps), ("target", states))):
        on_progress(i, 2, f"UMAP of {key} representations")
        data = torch.cat(feats)[pick].float().numpy()
        embeddings[key] = umap.UMAP(n_neighbors=min(15, len(pick) - 1), random_state=seed).fit_transform(data).tolist()
    return {**embeddings, "remaining": np.concatenate(remaining)[pick].tolist(),
            "step": np.concatenate(steps)[pick].tolist(), "split": split, "layer": layer}
