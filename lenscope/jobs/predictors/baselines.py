"""Baseline jobs behind ``lenscope train-baselines`` and the Results page.

Each baseline is trained on the train split of a dataset (prompt-level splits, as every lenscope predictor),
predicts every run's output length (step 0), and is registered as a predictor of kind ``baseline`` named
``<baseline>:<dataset>`` with its artifact and its predictions. Expensive inputs are cached in the store:
prompt embeddings of the proxy encoder (one tensor per distinct prompt text) and PiA answers of the target
(one result per model and prompt). :func:`lenscope.jobs.results.leaderboard.benchmark_frame` gathers every predictor of
a dataset for the Results page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lenscope.analysis.baselines.encoder import ENCODER_ID, embed_texts, load_encoder
from lenscope.analysis.baselines.ltr import CALIBRATION_FILE, ranking_scores, train_ranker
from lenscope.analysis.baselines.pia import (
    PIA_TEMPLATE,
    TOKENS_PER_WORD,
    ask_lengths,
    parse_length_answer,
)
from lenscope.analysis.baselines.proxy import (
    bucket_predict,
    train_bucket_classifier,
    train_regressor,
)
from lenscope.analysis.baselines.trail import train_trail
from lenscope.analysis.core.metrics import prediction_metrics
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.splits import evaluation_split
from lenscope.analysis.egtp.training import HeadConfig, save_head
from lenscope.analysis.results.leaderboard import (
    kendall_tau,
)
from lenscope.jobs.predictors.artifacts import with_artifact_hashes
from lenscope.jobs.runs.datasets import JobResult, dataset_runs
from lenscope.jobs.runs.features import run_features
from lenscope.models.atomic_files import write_text
from lenscope.models.target import TargetModel
from lenscope.store.memo import TENSORS
from lenscope.store.settings import get_settings
from lenscope.store.store import Store, text_hash

BASELINES = ("ssjf-reg", "ssjf-mc", "s3", "trail", "pia", "ltr")
DESCRIPTIONS = {
    "ssjf-reg": "SSJF-Reg: MLP regression of log length on proxy-encoder prompt embeddings",
    "ssjf-mc": "SSJF-MC: multi-class over log-spaced length bins on prompt embeddings",
    "s3": "S3: classification into equal-width length buckets on prompt embeddings",
    "trail": "TRAIL: MLP probe (binned) on the target's mean-pooled prompt states at one layer",
    "pia": "PiA: the target model's own answer to 'how long will your answer be?'",
    "ltr": "LTR: learning-to-rank scorer on prompt embeddings, scores mapped to lengths by quantiles",
}
BASELINE_KIND, EMBEDDING_KIND, PIA_ANSWER_KIND = "baseline", "encoder_embedding", "pia_answer"
PIA_BATCH = 64


@dataclass
class BaselineConfig:
    """Hyper-parameters shared by the baselines (heads are small MLPs on frozen features)."""

    epochs: int = 60
    lr: float = 1e-3
    batch_size: int = 16
    hidden: int = 256
    seed: int = 42
    buckets: int = 10
    trail_layer: int = 15
    ltr_loss: str = "listmle"
    ltr_batch_size: int = 32
    pia_max_new_tokens: int = 24

    def head(self, batch_size: int | None = None) -> HeadConfig:
        return HeadConfig(bins=self.buckets, hidden=self.hidden, lr=self.lr, batch_size=batch_size or self.batch_size,
                          epochs=self.epochs, seed=self.seed)


def baseline_name(baseline: str, dataset: str) -> str:
    return f"{baseline}:{dataset}"


def prompt_embeddings(store: Store, texts: Sequence[str], on_progress: Progress = no_progress) -> torch.Tensor:
    """Proxy-encoder embeddings [N, 384] of ``texts``, each distinct text encoded once and kept in the store."""
    distinct = list(dict.fromkeys(texts))

    def encode(positions: list[int]) -> list[dict[str, torch.Tensor]]:
        missing = [distinct[i] for i in positions]
        on_progress(0, len(missing), "encoding prompts")
        vectors = embed_texts(load_encoder(), missing, on_progress=on_progress)
        return [{"embedding": vec.contiguous()} for vec in vectors]

    kept = store.memo_many(EMBEDDING_KIND, [{"encoder": ENCODER_ID, "text": text_hash(t)} for t in distinct], encode,
                           names=lambda i: f"{ENCODER_ID} {text_hash(distinct[i])[:12]}", codec=TENSORS)
    found = {text: entry.value["embedding"] for text, entry in zip(distinct, kept)}
    return torch.stack([found[t] for t in texts]) if texts else torch.zeros(0, 384)


def pia_answers(store: Store, target: TargetModel, prompts: Sequence[str], max_new_tokens: int = 24,
                on_progress: Progress = no_progress) -> list[str]:
    """The target's answers to the PiA question for each prompt (asked once per model and prompt, in batches
    of :data:`PIA_BATCH`)."""
    def config(prompt: str) -> dict:
        return {"model": target.key, "prompt": text_hash(prompt), "template": text_hash(PIA_TEMPLATE),
                "max_new_tokens": max_new_tokens}

    distinct = list(dict.fromkeys(prompts))
    kept = store.memo_many(PIA_ANSWER_KIND, [config(p) for p in distinct],
                           lambda positions: [{"answer": answer} for answer in
                                              ask_lengths(target, [distinct[i] for i in positions], max_new_tokens)],
                           names=lambda i: f"PiA {text_hash(distinct[i])[:12]}", batch_size=PIA_BATCH,
                           on_batch=lambda done, total: on_progress(done, total, "asking the target (PiA)"))
    answers = {prompt: entry.value["answer"] for prompt, entry in zip(distinct, kept)}
    return [answers[p] for p in prompts]


@dataclass
class BaselineData:
    """Runs of a dataset (run_id, prompt_id, prompt, scenario, output_tokens, split) and their lengths."""

    runs: pd.DataFrame
    lengths: torch.Tensor
    masks: dict[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def load(cls, store: Store, dataset: str, include_censored: bool = False) -> BaselineData:
        runs = dataset_runs(store, dataset, include_censored).reset_index(drop=True)
        masks = {s: torch.tensor((runs["split"] == s).to_numpy()) for s in ("train", "val", "test")}
        if int(masks["train"].sum()) < 2:
            raise ValueError(f"dataset {dataset!r} has {int(masks['train'].sum())} training runs; need at least 2 "
                             f"(collect more with `python -m lenscope collect --dataset {dataset}`)")
        return cls(runs, torch.tensor(runs["output_tokens"].to_numpy(), dtype=torch.float32), masks)

    def part(self, x: torch.Tensor, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        return x[self.masks[split]], self.lengths[self.masks[split]]


@dataclass
class Fitted:
    """A trained baseline: predicted lengths of every run, where it was saved, what to record about it."""

    predicted: np.ndarray
    artifact: Path
    config: dict
    metrics: dict = field(default_factory=dict)


def _epoch_cb(on_progress: Progress, total: int, label: str):
    return lambda epoch, *rest: on_progress(epoch, total, label)


def baseline_inputs(store: Store, baseline: str, runs: pd.DataFrame, cfg: BaselineConfig,
                    target: TargetModel | None = None, on_progress: Progress = no_progress) -> torch.Tensor | list[str]:
    """What ``baseline`` reads for each run: proxy-encoder prompt embeddings [N, 384], the target's mean-pooled
    prompt states at ``cfg.trail_layer`` (TRAIL), or the target's answers to the PiA question."""
    if baseline == "trail":
        feats = []
        for i, rid in enumerate(runs["run_id"]):
            feats.append(run_features(store, int(rid), cfg.trail_layer, 1.0)["prompt.mean"].float())
            on_progress(i + 1, len(runs), f"prompt states of layer {cfg.trail_layer}")
        return torch.stack(feats)
    if baseline == "pia":
        if target is None:
            raise ValueError("the PiA baseline asks the target model: load it (CLI: --model; page: sidebar)")
        return pia_answers(store, target, runs["prompt"].tolist(), cfg.pia_max_new_tokens, on_progress)
    return prompt_embeddings(store, runs["prompt"].tolist(), on_progress)


def _fit_ssjf_reg(x, data, cfg, out, on_progress) -> Fitted:
    probe = train_regressor(*data.part(x, "train"), epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size,
                            seed=cfg.seed, hidden=cfg.hidden,
                            on_epoch=_epoch_cb(on_progress, cfg.epochs, "train ssjf-reg"))
    return Fitted(probe.predict(x).numpy(), probe.save(out), {"encoder": ENCODER_ID})


def _bucket_fitter(scheme: str):
    def fit(x, data, cfg, out, on_progress) -> Fitted:
        head = train_bucket_classifier(*data.part(x, "train"), scheme, cfg.buckets, cfg.head(), *data.part(x, "val"),
                                       on_epoch=_epoch_cb(on_progress, cfg.epochs, f"train {scheme}-bin classifier"))
        meta = {"encoder": ENCODER_ID, "scheme": scheme, "buckets": cfg.buckets, "centers": head.centers.tolist()}
        return Fitted(bucket_predict(head, x), save_head(head, out / "head.safetensors", meta), meta)
    return fit


def _fit_trail(x, data, cfg, out, on_progress) -> Fitted:
    probe = train_trail(*data.part(x, "train"), cfg.trail_layer, epochs=cfg.epochs, lr=cfg.lr,
                        batch_size=cfg.batch_size, seed=cfg.seed, hidden=cfg.hidden,
                        on_epoch=_epoch_cb(on_progress, cfg.epochs, "train trail"))
    return Fitted(probe.predict(x).numpy(), probe.save(out), {"layer": cfg.trail_layer, "pooling": "mean"})


def _fit_ltr(x, data, cfg, out, on_progress) -> Fitted:
    scorer, qmap = train_ranker(*data.part(x, "train"), cfg.ltr_loss, cfg.head(cfg.ltr_batch_size),
                                *data.part(x, "val"),
                                on_epoch=_epoch_cb(on_progress, cfg.epochs, f"train ltr ({cfg.ltr_loss})"))
    scores = ranking_scores(scorer, x)
    scorer.save(out)
    qmap.save(out / CALIBRATION_FILE)
    ev = (data.runs["split"] == evaluation_split(data.runs["split"])).to_numpy()
    return Fitted(qmap(scores), out, {"encoder": ENCODER_ID, "loss": cfg.ltr_loss, "calibration": "quantile"},
                  {"kendall_tau_scores": kendall_tau(scores[ev], data.lengths.numpy()[ev])})


def _fit_pia(answers, data, cfg, out, on_progress) -> Fitted:
    # an estimate past the longest answer in the data (up to 1e13 tokens on the study) is clipped to it
    fallback, cap = float(data.part(data.lengths, "train")[1].median()), float(data.lengths.max())
    estimates = [parse_length_answer(a, fallback, cap) for a in answers]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "answers.json"
    write_text(path, json.dumps([{"run_id": int(r), "answer": a, "tokens": e.tokens, "flagged": e.flagged,
                                  "reason": e.reason} for r, a, e in zip(data.runs["run_id"], answers, estimates)],
                                indent=1))
    flagged = sum(e.flagged for e in estimates)
    return Fitted(np.array([e.tokens for e in estimates]), path,
                  {"template": PIA_TEMPLATE, "tokens_per_word": TOKENS_PER_WORD, "fallback_median": fallback,
                   "clip": cap},
                  {"flagged": flagged, "flagged_share": flagged / len(estimates),
                   "clipped": sum("clipped to" in e.reason for e in estimates)})


# Each fitter trains on ``data.masks["train"]`` (and "val" where it stops early) from the inputs of
# :func:`baseline_inputs` and predicts every run of ``data``.
FITTERS = {"ssjf-reg": _fit_ssjf_reg, "ssjf-mc": _bucket_fitter("log"), "s3": _bucket_fitter("equal"),
           "trail": _fit_trail, "pia": _fit_pia, "ltr": _fit_ltr}


def train_baseline(store: Store, dataset: str, baseline: str, target: TargetModel | None = None,
                   config: BaselineConfig | None = None, data: BaselineData | None = None,
                   on_progress: Progress = no_progress) -> JobResult:
    """Train one baseline on ``dataset``, store its artifact, predictor row and step-0 predictions."""
    store.require_writable(f"training {baseline} on {dataset!r}")  # before any work, not after it
    if baseline not in FITTERS:
        raise ValueError(f"unknown baseline {baseline!r}; choose from {', '.join(BASELINES)}")
    cfg = config or BaselineConfig()
    data = data or BaselineData.load(store, dataset)
    name = baseline_name(baseline, dataset)
    out = get_settings().artifact_path("baselines", name)
    x = baseline_inputs(store, baseline, data.runs, cfg, target, on_progress)
    fitted = FITTERS[baseline](x, data, cfg, out, on_progress)
    if baseline == "pia":
        fitted.config["model_key"] = target.key
    frame = data.runs[["run_id", "prompt_id", "split", "scenario"]].assign(step=0, predicted=fitted.predicted,
                                                                           true=data.lengths.numpy())
    metrics = {**prediction_metrics(frame), **fitted.metrics}
    row = {"baseline": baseline, "dataset": dataset, "description": DESCRIPTIONS[baseline], **asdict(cfg),
           **fitted.config, "include_censored": bool(data.runs["censored"].any())}
    pid = store.save_predictor(name, BASELINE_KIND, with_artifact_hashes(row, fitted.artifact), metrics,
                               str(fitted.artifact), int(data.runs["model_id"].iloc[0]),
                               store.dataset_id(dataset))
    store.save_predictions(pid, frame[["run_id", "step", "predicted", "true", "split"]])
    return JobResult(pid, name, metrics)


def parse_selection(text: str | Sequence[str] | None) -> list[str]:
    """Baselines named in ``text`` (comma-separated) or all of them; ValueError for unknown names."""
    names = list(BASELINES) if not text else [n.strip() for n in (text.split(",") if isinstance(text, str) else text)
                                              if n.strip()]
    unknown = sorted(set(names) - set(BASELINES))
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; choose from {', '.join(BASELINES)}")
    return names


def train_baselines(store: Store, dataset: str, baselines: Sequence[str] = BASELINES,
                    target: TargetModel | None = None, config: BaselineConfig | None = None,
                    include_censored: bool = False, on_progress: Progress = no_progress) -> list[JobResult]:
    """Train the chosen baselines one after the other on the same data (runs cut at the token cap only with
    ``include_censored``)."""
    chosen = parse_selection(baselines)
    if "pia" in chosen and target is None:
        raise ValueError("the PiA baseline needs the target model; load one or leave pia out")
    data = BaselineData.load(store, dataset, include_censored)
    return [train_baseline(store, dataset, b, target, config, data, on_progress) for b in chosen]
