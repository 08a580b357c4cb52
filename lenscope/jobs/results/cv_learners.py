"""The learners of the study's cross-validation: the median constant, the EGTP static heads (every pooling, the head
options, the censoring-aware head), the attribution's attention-pooling head, PLP, the target probe and the
baselines.

Every learner reads its inputs from one :class:`StudyInputs`, which computes each of them once for all runs of
the dataset (pooled prompt features, prompt states, encoder embeddings, probe states) and hands each fold its
rows, so five folds times several seeds cost five times several trainings, not as many passes over the store.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.drafter.probes import ProbeConfig, train_probe
from lenscope.analysis.egtp.attention_head import predict_runs, train_attention_head
from lenscope.analysis.egtp.plp import plp_inputs, plp_steps, training_steps
from lenscope.analysis.egtp.pooling import POOLINGS
from lenscope.analysis.egtp.training import HeadConfig, HeadTask, predict, train_heads
from lenscope.analysis.results.leaderboard import constant_predictions
from lenscope.jobs.drafter.training import probe_samples
from lenscope.jobs.egtp.heads import HEAD_VARIANTS
from lenscope.jobs.predictors.baselines import BASELINES, FITTERS, BaselineConfig, BaselineData, baseline_inputs
from lenscope.jobs.results.crossval import MAX_STEP, TRAIN_STEPS, Fold, Learner
from lenscope.jobs.runs.features import run_features
from lenscope.models.target import TargetModel
from lenscope.store.store import Store

CONSTANT = "median constant"
ATTENTION = "attention pooling head (learned)"
CENSORING_AWARE = "censoring-aware head"


def static_name(pooling: str, option: str | None = None) -> str:
    """E.g. ``EGTP head (egtp pooling)`` or ``EGTP head (egtp pooling, linear bins)``."""
    return f"EGTP head ({pooling} pooling{', ' + option if option else ''})"


@dataclass
class StudyInputs:
    """Per-run inputs of one dataset's runs (``runs`` from :func:`lenscope.jobs.results.crossval.cv_runs`), computed on
    first use and shared by every fold and seed."""

    store: Store
    runs: pd.DataFrame
    layer: int
    probe_layer: int
    target: TargetModel | None = None
    on_progress: Progress = no_progress
    _baseline: dict = field(default_factory=dict)

    @cached_property
    def _features(self) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
        """One pass over the stored features: prompt poolings [N, d] per pooling, and per run the EGTP summaries
        of the answer's prefixes (the first :data:`MAX_STEP` + 1 of a censored run)."""
        prompts: dict[str, list] = {p: [] for p in POOLINGS}
        generated = []
        for i, row in enumerate(self.runs.itertuples()):
            feats = run_features(self.store, int(row.run_id), self.layer, 1.0)
            for p in POOLINGS:
                prompts[p].append(feats[f"prompt.{p}"].float())
            generated.append(feats["generated.egtp"][:None if row.finished else MAX_STEP + 1].half())
            self.on_progress(i + 1, len(self.runs), f"pooled features (layer {self.layer})")
        return {p: torch.stack(v) for p, v in prompts.items()}, generated

    @property
    def pooled(self) -> dict[str, torch.Tensor]:
        return self._features[0]

    @property
    def generated(self) -> list[torch.Tensor]:
        return self._features[1]

    @cached_property
    def prompt_states(self) -> list[torch.Tensor]:
        """Per run: the prompt's content states [T, d] at the head layer, what the attention-pooling head reads."""
        out = []
        for i, row in enumerate(self.runs.itertuples()):
            run = self.store.load_run(int(row.run_id), layers=[self.layer])
            out.append(run.features.hidden[self.layer][run.content_start:run.prompt_len].half())
            self.on_progress(i + 1, len(self.runs), f"prompt states (layer {self.layer})")
        return out

    @cached_property
    def probe_states(self) -> list[tuple[torch.Tensor, np.ndarray]]:
        """Per run: the probe layer's state at the last visible position of each decoding step a run trains on
        (:data:`TRAIN_STEPS`; the first :data:`MAX_STEP` + 1 of a censored run, which is only ever tested), and
        the steps."""
        out = []
        for i, row in enumerate(self.runs.itertuples()):
            run = self.store.load_run(int(row.run_id), layers=[self.probe_layer])
            states, steps, _ = probe_samples(run, self.probe_layer, None if row.finished else MAX_STEP)
            keep = np.isin(steps, _training_steps(int(row.output_tokens)))
            out.append((states[torch.as_tensor(keep)].half(), steps[keep]))
            self.on_progress(i + 1, len(self.runs), f"probe states (layer {self.probe_layer})")
        return out

    def baseline(self, name: str, cfg: BaselineConfig) -> torch.Tensor | list[str]:
        key = "trail" if name == "trail" else "pia" if name == "pia" else "encoder"
        if key not in self._baseline:
            self._baseline[key] = baseline_inputs(self.store, name, self.runs, cfg, self.target, self.on_progress)
        return self._baseline[key]

    @cached_property
    def lengths(self) -> torch.Tensor:
        return torch.tensor(self.runs["output_tokens"].to_numpy(), dtype=torch.float32)


def _training_steps(length: int) -> np.ndarray:
    return training_steps(length, **TRAIN_STEPS)


def _static_frame(runs: pd.DataFrame, rows: np.ndarray, predicted) -> pd.DataFrame:
    return pd.DataFrame({"run_id": runs["run_id"].to_numpy()[rows], "step": 0, "predicted": np.asarray(predicted)})


def median_constant() -> Learner:
    """At step t, the median remaining length of the training folds' finished runs still generating at t
    (:func:`lenscope.analysis.results.leaderboard.constant_predictions`, the reference of every page)."""
    def fit(fold: Fold, on_progress: Progress) -> pd.DataFrame:
        role = np.where(fold.mask("train") | fold.mask("val"), "train", np.where(fold.test, "test", "unused"))
        frame = constant_predictions(fold.runs.assign(split=role), range(MAX_STEP + 1))
        frame = frame[(frame["split"] == "test") & (frame["true"] > 0)]  # a run generating at step t
        return frame[["run_id", "step", "predicted"]].reset_index(drop=True)

    return Learner(CONSTANT, dynamic=True, fit_predict=fit, config={"statistic": "median"}, seeds=1)


def static_head(inputs: StudyInputs, pooling: str, config: HeadConfig, option: str | None = None) -> Learner:
    """An EGTP soft-label head on one pooling of the prompt (``config`` carries the head options); its folds and
    seeds train side by side (:func:`lenscope.analysis.egtp.training.train_heads`)."""
    def task(fold: Fold, on_progress: Progress) -> HeadTask:
        x, y = inputs.pooled[pooling], inputs.lengths
        aware = config.censoring == "aware"
        tr, va = (fold.mask(role, finished_only=not aware) for role in ("train", "val"))
        censored = torch.tensor(fold.runs["censored"].to_numpy(dtype=bool))
        return HeadTask(x[tr], y[tr], x[va], y[va], replace(config, seed=fold.seed),
                        lambda e, n, row: on_progress(e, n, "training"),
                        censored[tr] if aware else None, censored[va] if aware else None)

    def fit_many(folds: Sequence[Fold], on_progress: Progress) -> list[pd.DataFrame]:
        tasks = [task(fold, on_progress if k == 0 else no_progress) for k, fold in enumerate(folds)]
        return [_static_frame(fold.runs, fold.test, predict(res.head, inputs.pooled[pooling][fold.test]))
                for fold, res in zip(folds, train_heads(tasks))]

    return Learner(static_name(pooling, option), dynamic=False, fit_predict=lambda f, p: fit_many([f], p)[0],
                   config={"pooling": pooling, "layer": inputs.layer, "head": asdict(config)}, seeds=5,
                   fit_predict_many=fit_many)


def attention_learner(inputs: StudyInputs, config: HeadConfig) -> Learner:
    """The attribution's attention-pooling head (no entropy in its path) on the prompt's states."""
    def fit(fold: Fold, on_progress: Progress) -> pd.DataFrame:
        states, y = inputs.prompt_states, inputs.lengths
        tr, va = (np.flatnonzero(fold.mask(role)) for role in ("train", "val"))
        res = train_attention_head([states[i] for i in tr], y[tr], [states[i] for i in va], y[va],
                                   replace(config, seed=fold.seed), lambda e, n, row: on_progress(e, n, "training"))
        test = [states[i] for i in np.flatnonzero(fold.test)]
        return _static_frame(fold.runs, fold.test, predict_runs(res.head, test))

    return Learner(ATTENTION, dynamic=False, fit_predict=fit, config={"layer": inputs.layer, "head": asdict(config)})


def plp_learner(inputs: StudyInputs, config: HeadConfig) -> Learner:
    """PLP on the EGTP-pooled prompt and the answer's prefix summary, trained on the :data:`TRAIN_STEPS` of the
    training runs, validated and tested on steps 0..:data:`MAX_STEP`. A fold's seeds train side by side (one
    fold's samples in memory at a time: about 125,000 rows of 1,153 features in the full study)."""
    def samples(rows: np.ndarray, train: bool) -> tuple[torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
        prompt, xs, steps, run_ids, remaining = inputs.pooled["egtp"], [], [], [], []
        for i in np.flatnonzero(rows):
            length = int(inputs.runs["output_tokens"].iloc[i])
            t = _training_steps(length) if train else plp_steps(length, MAX_STEP)
            xs.append(plp_inputs(prompt[i], inputs.generated[i].float(), t))
            steps.append(t)
            run_ids.append(np.full(len(t), int(inputs.runs["run_id"].iloc[i])))
            remaining.append(length - t)
        return torch.cat(xs), np.concatenate(steps), np.concatenate(run_ids), np.concatenate(remaining)

    def fit_fold(folds: Sequence[Fold], on_progress: Progress) -> list[pd.DataFrame]:
        """The seeds of one fold, side by side."""
        x_tr, _, _, y_tr = samples(folds[0].mask("train"), True)
        x_va, _, _, y_va = samples(folds[0].mask("val"), False)
        y_tr, y_va = torch.as_tensor(y_tr, dtype=torch.float32), torch.as_tensor(y_va, dtype=torch.float32)
        results = train_heads([HeadTask(x_tr, y_tr, x_va, y_va, replace(config, seed=fold.seed),
                                        (lambda e, n, row: on_progress(e, n, "training")) if k == 0 else None)
                               for k, fold in enumerate(folds)])
        x_te, t_te, r_te, _ = samples(folds[0].test, False)
        return [pd.DataFrame({"run_id": r_te, "step": t_te, "predicted": predict(res.head, x_te)}) for res in results]

    def fit_many(folds: Sequence[Fold], on_progress: Progress) -> list[pd.DataFrame]:
        by_fold: dict[int, list[int]] = {}
        for k, fold in enumerate(folds):
            by_fold.setdefault(fold.fold, []).append(k)
        frames: list[pd.DataFrame | None] = [None] * len(folds)
        for positions in by_fold.values():
            for k, frame in zip(positions, fit_fold([folds[k] for k in positions], on_progress)):
                frames[k] = frame
        return frames  # type: ignore[return-value]

    return Learner("PLP", dynamic=True, fit_predict=lambda f, p: fit_many([f], p)[0],
                   config={"layer": inputs.layer, "head": asdict(config), "train_steps": TRAIN_STEPS},
                   fit_predict_many=fit_many)


def probe_learner(inputs: StudyInputs, epochs: int) -> Learner:
    """The TRAIL-style MLP probe on the target's states at the probe layer, trained on the :data:`TRAIN_STEPS` of
    the fold's training runs; of up to ``epochs`` epochs, the one with the lowest MAE over the validation runs'
    steps 0..:data:`MAX_STEP` is kept."""
    def samples(runs: np.ndarray, lengths: np.ndarray, upto: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        states, remaining = [], []
        for i in runs:
            x, steps = inputs.probe_states[i]
            keep = steps <= (upto if upto is not None else steps.max())
            states.append(x[torch.as_tensor(keep)])
            remaining.append(lengths[i] - steps[keep])
        return torch.cat(states).float(), torch.as_tensor(np.concatenate(remaining))

    def fit(fold: Fold, on_progress: Progress) -> pd.DataFrame:
        lengths = fold.runs["output_tokens"].to_numpy()
        x, remaining = samples(np.flatnonzero(fold.mask("train")), lengths, None)
        val = samples(np.flatnonzero(fold.mask("val")), lengths, MAX_STEP) if fold.mask("val").any() else None
        probe = train_probe(x, remaining, ProbeConfig(in_dim=x.shape[1], layer=inputs.probe_layer), epochs=epochs,
                            seed=fold.seed, val=val, on_epoch=lambda e, loss: on_progress(e, epochs, "training"))
        frames = []
        for i in np.flatnonzero(fold.test):
            states, steps = inputs.probe_states[i]
            keep = steps <= MAX_STEP
            frames.append(pd.DataFrame({"run_id": int(fold.runs["run_id"].iloc[i]), "step": steps[keep],
                                        "predicted": probe.predict(states[torch.as_tensor(keep)].float()).numpy()}))
        return pd.concat(frames, ignore_index=True)

    return Learner(f"target probe (layer {inputs.probe_layer})", dynamic=True, fit_predict=fit,
                   config={"layer": inputs.probe_layer, "epochs": epochs, "mode": "regression",
                           "train_steps": TRAIN_STEPS, "validation": f"val runs, steps 0-{MAX_STEP}"})


def baseline_learner(inputs: StudyInputs, name: str, cfg: BaselineConfig | None = None) -> Learner:
    """One baseline of :mod:`lenscope.jobs.predictors.baselines`, trained on the fold's training runs (PiA only reads
    its fallback median there: it is deterministic, one seed)."""
    cfg = cfg or BaselineConfig()

    def fit(fold: Fold, on_progress: Progress) -> pd.DataFrame:
        x = inputs.baseline(name, cfg)
        masks = {"train": fold.mask("train"), "val": fold.mask("val"), "test": fold.test}
        data = BaselineData(fold.runs.assign(split=fold.roles), inputs.lengths,
                            {k: torch.as_tensor(v) for k, v in masks.items()})
        with tempfile.TemporaryDirectory() as out:
            fitted = FITTERS[name](x, data, replace(cfg, seed=fold.seed), Path(out), on_progress)
        return _static_frame(fold.runs, fold.test, fitted.predicted[fold.test])

    pia = {"clip": "the longest answer"} if name == "pia" else {}  # PiA's estimates are clipped to it
    return Learner(f"baseline {name}", dynamic=False, fit_predict=fit, config={**asdict(cfg), **pia},
                   seeds=1 if name == "pia" else 3)


def study_learners(inputs: StudyInputs, head_epochs: int = 60, probe_epochs: int = 30,
                   baselines: Sequence[str] = BASELINES) -> dict[str, Learner]:
    """Every learner the claims read, by name (PiA only when ``inputs`` has the target model)."""
    head = HeadConfig(epochs=head_epochs)
    learners = [median_constant()]
    learners += [static_head(inputs, p, head) for p in POOLINGS]
    learners += [static_head(inputs, "egtp", replace(head, **overrides), option)
                 for option, overrides in HEAD_VARIANTS.items()]
    learners.append(static_head(inputs, "egtp", replace(head, censoring="aware"), CENSORING_AWARE))
    learners.append(plp_learner(inputs, HeadConfig(epochs=max(2, head_epochs // 4), batch_size=64)))
    learners.append(probe_learner(inputs, probe_epochs))
    learners += [baseline_learner(inputs, b) for b in baselines if b != "pia" or inputs.target is not None]
    learners.append(attention_learner(inputs, replace(head, epochs=max(2, head_epochs // 2))))  # the slowest
    return {learner.name: learner for learner in learners}
