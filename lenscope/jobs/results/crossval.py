"""Grouped K-fold cross-validation: every run of a dataset gets an out-of-fold prediction from models that never
saw its conversation, from several training seeds.

Fold ``f`` of K tests on the leak groups of fold ``f`` (:func:`lenscope.analysis.core.splits.fold_of`) and trains on the
finished runs of the other folds, minus a hashed validation part that epochs and early stopping are chosen on
(:func:`lenscope.analysis.core.splits.role_in_fold`). Test rows are every run of the fold, censored ones included (when
they are stored), so a clipped MAE over all runs can be scored. Each (learner, fold, seed) is trained once and
its predictions kept in the store (``cv_predictions``, keyed by the dataset's runs), so an interrupted
cross-validation resumes and a finished one is read back at once. A learner whose trainings are small (the EGTP
heads, PLP) trains its missing folds and seeds side by side, bit for bit as one at a time, and stores them together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.splits import FOLDS, role_in_fold
from lenscope.jobs.runs.datasets import all_runs
from lenscope.store.memo import TENSORS
from lenscope.store.store import Store

CV_KIND = "cv_predictions"
MAX_STEP = 32  # dynamic learners predict steps 0..MAX_STEP
LATER_STEPS = 64  # ... and train on every step up to MAX_STEP plus this many later ones per run
# Dynamic learners train on every step up to MAX_STEP (the steps they are tested on) and LATER_STEPS spread
# over the rest of each run: a third of the samples of every step, for a five-fold, three-seed protocol on CPU.
TRAIN_STEPS = {"dense": MAX_STEP, "later": LATER_STEPS}  # training_steps' arguments
# Every predictor trains on finished runs and tests a censored one at steps 0..MAX_STEP only, which read its answer's
# first MAX_STEP + 1 tokens at most: the study imports a censored run's features that far (the store keeps every id).
CENSORED_ANSWER_TOKENS = MAX_STEP + 1


@dataclass(frozen=True)
class Fold:
    """One training of a learner: every run of the dataset (finished and censored), the fold held out, the number
    of folds and the training seed."""

    runs: pd.DataFrame
    fold: int
    folds: int
    seed: int

    @property
    def roles(self) -> np.ndarray:
        return np.array([role_in_fold(g, self.fold, self.folds) for g in self.runs["group"]])

    def mask(self, role: str, finished_only: bool = True) -> np.ndarray:
        """Runs of ``role`` (``train``, ``val`` or ``test``); training and validation use finished runs only."""
        keep = self.roles == role
        return keep & ~self.runs["censored"].to_numpy() if finished_only else keep

    @property
    def test(self) -> np.ndarray:
        """Every run of the held-out fold with at least one generated token, censored ones included."""
        return self.mask("test", finished_only=False) & (self.runs["output_tokens"].to_numpy() > 0)


FitPredict = Callable[[Fold, Progress], pd.DataFrame]
FitPredictMany = Callable[[Sequence[Fold], Progress], list[pd.DataFrame]]


@dataclass(frozen=True)
class Learner:
    """A predictor that cross-validation trains per fold and seed: ``fit_predict(fold, on_progress)`` returns
    ``run_id, step, predicted`` for the fold's test runs (step 0 only for a static learner, steps
    0..:data:`MAX_STEP` while the run is still generating for a dynamic one). ``fit_predict_many(folds,
    on_progress)``, where a learner has it, trains several folds and seeds side by side and returns their frames
    in order, each the same as ``fit_predict``'s. ``config`` is part of the cache key; ``seeds`` is how many
    training seeds it gets by default (1 for a deterministic one)."""

    name: str
    dynamic: bool
    fit_predict: FitPredict = field(compare=False, repr=False)
    config: dict = field(default_factory=dict)
    seeds: int = 3
    fit_predict_many: FitPredictMany | None = field(default=None, compare=False, repr=False)


def cv_runs(store: Store, dataset: str) -> pd.DataFrame:
    """Every run of ``dataset`` (censored ones too) with its group, fold and censoring."""
    return all_runs(store, dataset).reset_index(drop=True)


def runs_digest(runs: pd.DataFrame) -> str:
    """A short digest of which runs a dataset holds and which of them finished: cached predictions of a grown
    dataset are not reused."""
    rows = sorted(zip(runs["run_id"].astype(int), runs["finished"].astype(bool)))
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def _as_tensors(frame: pd.DataFrame) -> dict[str, torch.Tensor]:
    return {"run_id": torch.tensor(frame["run_id"].to_numpy(dtype=np.int64)),
            "step": torch.tensor(frame["step"].to_numpy(dtype=np.int64)),
            "predicted": torch.tensor(frame["predicted"].to_numpy(dtype=np.float64))}


def oof_predictions(store: Store, dataset: str, learner: Learner, folds: int = FOLDS, seeds: int | None = None,
                    runs: pd.DataFrame | None = None, on_progress: Progress = no_progress) -> pd.DataFrame:
    """Out-of-fold predictions of ``learner`` for every run of ``dataset``: one row per (seed, run, step) with
    ``predicted``, the truth (``true``: the remaining length, a lower bound for a censored run), ``censored``,
    ``fold``, ``group``, ``prompt_id`` and ``scenario``. Trains what is not stored yet: one (fold, seed) at a time,
    each stored as it finishes, or all missing ones side by side where the learner has ``fit_predict_many``."""
    runs = cv_runs(store, dataset) if runs is None else runs
    n_seeds = learner.seeds if seeds is None or learner.seeds == 1 else seeds
    digest = runs_digest(runs)
    jobs = [Fold(runs, fold, folds, seed) for fold in range(folds) for seed in range(n_seeds)]
    total = len(jobs)

    def label(job: Fold) -> str:
        return f"{learner.name}: fold {job.fold + 1}/{folds}, seed {job.seed + 1}/{n_seeds}"

    def compute(positions: list[int]) -> list[dict[str, torch.Tensor]]:
        chosen = [jobs[i] for i in positions]
        if learner.fit_predict_many is not None:
            what = f"{learner.name}: folds and seeds side by side ({len(chosen)}/{total})"
            on_progress(total - len(chosen), total, what)
            frames = learner.fit_predict_many(chosen, lambda d, t, phase: on_progress(d, t, f"{what} · {phase}"))
        else:
            on_progress(positions[0], total, label(chosen[0]))
            frames = [learner.fit_predict(chosen[0], lambda d, t, phase: on_progress(
                d, t, f"{label(chosen[0])} · {phase}"))]
        return [_as_tensors(frame) for frame in frames]

    configs = [{"dataset": dataset, "runs": digest, "learner": learner.name, "learner_config": learner.config,
                "folds": folds, "fold": job.fold, "seed": job.seed} for job in jobs]
    kept = store.memo_many(CV_KIND, configs, compute, codec=TENSORS,
                           names=lambda i: f"{learner.name} {dataset} fold {jobs[i].fold}/{folds} seed {jobs[i].seed}",
                           batch_size=None if learner.fit_predict_many is not None else 1)
    parts = [pd.DataFrame({k: v.numpy() for k, v in entry.value.items()}).assign(seed=job.seed, fold=job.fold)
             for job, entry in zip(jobs, kept)]
    on_progress(total, total, f"{learner.name}: done")
    frame = pd.concat(parts, ignore_index=True)
    meta = runs.set_index("run_id")[["output_tokens", "censored", "group", "prompt_id", "scenario"]]
    frame = frame.join(meta, on="run_id")
    frame["true"] = (frame["output_tokens"] - frame["step"]).astype(float)
    return frame.drop(columns="output_tokens")
