"""Length predictions for new prompts: read a prompts file, run the target once per prompt (prefill only, no
answer is generated) and apply the named predictors (:mod:`lenscope.jobs.predictors.catalog`).

``python -m lenscope predict --prompts FILE --predictor NAME`` and :func:`lenscope.api.load_predictor` both
end here. Soft-label heads (``egtp``, ``mean``, ``max``, ``last``, ``plp``) also give quantiles of their bin
distribution.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd
import torch

from lenscope.analysis.baselines.encoder import embed_texts, load_encoder
from lenscope.analysis.baselines.ltr import CALIBRATION_FILE, QuantileMap, ranking_scores
from lenscope.analysis.baselines.proxy import bucket_predict
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.safe_files import (
    LimitError,
    check_lines,
    column_list,
    disk_limit,
    load_json,
    read_bounded,
    read_csv_bounded,
    regular_file,
)
from lenscope.analysis.core.soft_label_head import SoftLabelHead, bin_quantiles
from lenscope.analysis.drafter.probes import LengthProbe, step_features
from lenscope.analysis.egtp.plp import plp_inputs
from lenscope.analysis.egtp.pooling import pool
from lenscope.analysis.egtp.training import load_head
from lenscope.jobs.egtp.heads import PLP_KIND, STATIC_KIND, FeatureTable, feature_table
from lenscope.jobs.predictors.baselines import BASELINE_KIND, prompt_embeddings
from lenscope.jobs.predictors.catalog import BASELINE_HEAD, BUCKET_BASELINES, PredictorFiles
from lenscope.jobs.runs.datasets import dataset_runs
from lenscope.models.atomic_files import atomic_path
from lenscope.models.drafter import Drafter, length_from_log
from lenscope.models.target import SequenceFeatures, TargetModel, lone_surrogate, looks_binary
from lenscope.store.store import Store

QUANTILES = (0.1, 0.5, 0.9)
QUANTILE_COLUMNS = tuple(f"q{int(q * 100)}_tokens" for q in QUANTILES)
BATCH = 16  # prompts a forward pass
EXPECTED = "a list (or any iterable) of prompt texts, or a DataFrame with a 'prompt' column (and optionally 'id')"


def read_prompts(path: str | Path) -> pd.DataFrame:
    """Prompts (columns ``id``, ``prompt``) from JSON lines with ``prompt`` and an optional ``id``, a CSV with a
    ``prompt`` column (and optionally ``id``), or plain text with one prompt a line, checked as every prompt is
    (:func:`prompt_table`). ValueError on an empty file, a missing column, a prompt that is empty, binary or not
    valid text, or an id given twice; LimitError (a
    ValueError) on anything but a regular file, or one over the bounds of :mod:`lenscope.analysis.core.safe_files`
    (bytes:
    :func:`~lenscope.analysis.core.safe_files.disk_limit`, a share of the memory available; line length, CSV columns,
    JSON nesting and integer digits)."""
    path = regular_file(path, "prompts file")
    max_bytes, why = disk_limit()
    data = read_bounded(path, max_bytes, path.name, why=why)
    check_lines(data, path.name)
    text = data.decode("utf-8-sig", errors="replace")  # -sig: drops the BOM some editors write
    if not text.strip():
        raise ValueError(f"{path.name} holds no prompts")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        rows = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = load_json(line, f"{path.name} line {n}")
            except LimitError:
                raise
            except ValueError as exc:
                raise ValueError(f"{path.name} line {n} is not JSON ({getattr(exc, 'msg', exc)})") from None
            if not isinstance(record, dict) or "prompt" not in record:
                raise ValueError(f"{path.name} line {n} has no \"prompt\" field")
            for field in ("prompt", "id"):  # a JSON \ud800 escape: no text column, hash or tokenizer takes it
                invalid = isinstance(record.get(field), str) and lone_surrogate(record[field], f"the {field}")
                if invalid:
                    raise ValueError(f"{path.name} line {n}: {invalid}")
            rows.append({"id": record.get("id"), "prompt": record["prompt"]})
        frame = pd.DataFrame(rows, columns=["id", "prompt"])
    elif suffix == ".csv":
        frame = read_csv_bounded(data, path.name, dtype=str, keep_default_na=False)
        if "prompt" not in frame:
            raise ValueError(f"{path.name} has no 'prompt' column (columns: {column_list(frame.columns, quote=False)})")
        frame = frame.assign(id=frame["id"] if "id" in frame else None)[["id", "prompt"]]
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        frame = pd.DataFrame({"id": None, "prompt": lines})
    return _checked(frame, path.name)


def prompt_table(prompts: pd.DataFrame | Iterable[str], name: str | None = None) -> pd.DataFrame:
    """``prompts`` as the frame (``id``, ``prompt``) every prediction reads: a DataFrame's ``prompt`` and ``id``
    columns, or the texts of any iterable (read once). TypeError for a bare string or anything but texts; then the
    checks of every prompt, whatever it came from (:func:`_checked`)."""
    if isinstance(prompts, str | bytes):
        raise TypeError(f"prompts must be {EXPECTED}, not a single {type(prompts).__name__}; wrap one prompt in a "
                        "list: [prompt]")
    if isinstance(prompts, pd.DataFrame):
        if "prompt" not in prompts:
            raise ValueError(f"the prompts frame has no 'prompt' column (columns: {column_list(prompts.columns)})")
        frame = pd.DataFrame({"id": prompts["id"].to_numpy() if "id" in prompts else None,
                              "prompt": prompts["prompt"].to_numpy()}, dtype=object)
    elif isinstance(prompts, Iterable):
        frame = pd.DataFrame({"id": None, "prompt": list(prompts)}, dtype=object)
    else:
        raise TypeError(f"prompts must be {EXPECTED}, not {type(prompts).__name__}")
    wrong = next(((k, p) for k, p in enumerate(frame["prompt"], start=1) if not isinstance(p, str)), None)
    if wrong is not None:
        what = "missing (None or NaN)" if _missing(wrong[1]) else type(wrong[1]).__name__
        raise TypeError(f"prompt {wrong[0]} is {what}, not a str: prompts must be {EXPECTED}")
    return _checked(frame, name)


def _missing(value: object) -> bool:
    """Whether a cell holds no value (None, NaN, pd.NA)."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _prompt_problem(prompt: object) -> str | None:
    """Why ``prompt`` is no prompt text (what :meth:`TargetModel.chat_ids` refuses before tokenizing), or None."""
    if not isinstance(prompt, str) or not prompt.strip():
        return " is empty or not text"
    if looks_binary(prompt):
        return " looks like binary data (NUL or many control characters), not text"
    invalid = lone_surrogate(prompt)
    return f": {invalid}" if invalid else None


def _checked(frame: pd.DataFrame, name: str | None) -> pd.DataFrame:
    """``frame`` (``id``, ``prompt``) with every prompt checked (:func:`_prompt_problem`: the first failure and how
    many fail alike) and unique ids, a missing or empty one becoming the prompt's 1-based position. ``name``: the
    file the prompts come from, which messages open with (None for prompts given in memory)."""
    lead = f"{name}: " if name else ""
    if frame.empty:
        raise ValueError(f"{name or 'the prompt list'} holds no prompts")
    bad = [(k, problem) for k, p in enumerate(frame["prompt"], start=1) if (problem := _prompt_problem(p))]
    if bad:
        alike = sum(1 for _, problem in bad if problem == bad[0][1])
        raise ValueError(f"{lead}prompt {bad[0][0]}{bad[0][1]}" + (f" ({alike} such prompts)" if alike > 1 else ""))
    ids = [str(k) if _missing(i) or not str(i).strip() else str(i)  # an empty CSV cell is no id
           for k, i in enumerate(frame["id"], start=1)]
    invalid = next((f"id {k}: {why}" for k, i in enumerate(ids, start=1) if (why := lone_surrogate(i, "the id"))), None)
    if invalid:
        raise ValueError(f"{lead}{invalid}")
    counts = Counter(ids)
    if len(counts) < len(ids):
        twice = next(i for i in ids if counts[i] > 1)
        rows = [k for k, i in enumerate(ids, start=1) if i == twice]
        raise ValueError(f"{lead}id {twice!r:.60} is given to prompts {rows[0]} and {rows[1]} "
                         f"({sum(n > 1 for n in counts.values())} ids repeat); give each prompt its own id")
    return frame.assign(id=pd.Series(ids, index=frame.index, dtype=str)).reset_index(drop=True)


@dataclass
class Prefill:
    """A prompt, the target's features of its chat-formatted ids and where the user's content starts in them."""

    prompt: str
    features: SequenceFeatures
    content_start: int


class Baseline:
    """A prompt-only baseline of :mod:`lenscope.jobs.predictors.baselines` loaded for new prompts: SSJF-Reg
    (regression), SSJF-MC and S3 (the most likely bucket's centre, with quantiles of the bucket distribution) and LTR
    (ranking scores mapped to lengths) on the proxy encoder's prompt embeddings; TRAIL (binned probe) on the target's
    mean-pooled prompt states."""

    def __init__(self, name: str, model: LengthProbe | SoftLabelHead, layers: list[int],
                 calibration: QuantileMap | None = None) -> None:
        self.name, self.model, self.layers, self.calibration = name, model, layers, calibration

    @classmethod
    def load(cls, path: Path, config: dict) -> Baseline:
        """The baseline saved at ``path`` (its folder, or its head file in a folder)."""
        folder, name = (path.parent if path.is_file() else path), config["baseline"]
        if name in BUCKET_BASELINES:
            return cls(name, load_head(folder / BASELINE_HEAD)[0], [])
        probe = LengthProbe.load(folder)
        if name == "trail":
            return cls(name, probe, [int(config["trail_layer"])])
        if name == "ltr":
            return cls(name, probe, [], QuantileMap.load(folder / CALIBRATION_FILE))
        return cls(name, probe, [])

    @torch.no_grad()
    def predict(self, prefills: Sequence[Prefill]) -> pd.DataFrame:
        if self.layers:  # TRAIL: the mean of the user content's states at its layer
            x = torch.stack([pool(p.features.hidden[self.layers[0]][p.content_start:],
                                  p.features.entropy[p.content_start:], "mean") for p in prefills])
        else:
            x = embed_texts(_encoder(), [p.prompt for p in prefills])
        if isinstance(self.model, SoftLabelHead):
            probs = torch.softmax(self.model(x.float()), dim=-1)
            return _with_quantiles(bucket_predict(self.model, x), probs, self.model)
        if self.calibration is not None:
            return pd.DataFrame({"predicted_tokens": self.calibration(ranking_scores(self.model, x))})
        return pd.DataFrame({"predicted_tokens": self.model.predict(x).numpy()})


@cache
def _encoder():
    """The proxy encoder of the embedding baselines, loaded once."""
    return load_encoder()


def _with_quantiles(predicted, probs: torch.Tensor, head: SoftLabelHead) -> pd.DataFrame:
    out = pd.DataFrame({"predicted_tokens": np.asarray(predicted, dtype=float)})
    quantiles = bin_quantiles(probs, head.bins, QUANTILES)
    for j, column in enumerate(QUANTILE_COLUMNS):
        out[column] = quantiles[:, j]
    return out


def check_model(files: PredictorFiles, model: str) -> None:
    """ValueError unless predictor ``files`` was trained on the states of ``model`` (a resolved model spec)."""
    if files.model != model:
        raise ValueError(f"predictor {files.name!r} was trained on the states of {files.model}, not of {model}; "
                         f"load that model (--model {files.model}) or train one on yours")


def chat_ids(model: TargetModel, frame: pd.DataFrame) -> list[list[int]]:
    """The chat-formatted ids of every prompt of ``frame`` on ``model``; ValueError naming the first it refuses
    (empty, binary, longer than the model's context)."""
    ids = []
    for key, prompt in zip(frame["id"], frame["prompt"]):
        try:
            ids.append(model.chat_ids(prompt))
        except ValueError as exc:
            raise ValueError(f"prompt {key}: {exc}") from None
    return ids


class LengthPredictor:
    """A loaded predictor: ``layers`` it reads from the target, and ``predict`` over prefilled prompts."""

    def __init__(self, files: PredictorFiles, target: TargetModel) -> None:
        check_model(files, target.source.spec)
        self.files, self.target = files, target
        config = files.manifest.get("config") or {}
        self.head: SoftLabelHead | None = None
        self.probe: LengthProbe | None = None
        self.drafter: Drafter | None = None
        if files.kind in (STATIC_KIND, PLP_KIND):
            self.head, meta = load_head(files.folder / files.reads[0])
            self.layers = [int(meta["layer"])]
            self.alpha = float(meta["alpha"])
            self.pooling = meta.get("pooling", meta.get("prompt_pooling", "egtp"))
        elif files.kind == "probe":
            self.probe = LengthProbe.load(files.path)
            self.layers = [int(x) for x in config.get("layers", [config.get("layer", self.probe.config.layer)])]
            self.view = config.get("view", "last")
        elif files.kind == "drafter":
            self.drafter = Drafter.load_for_target(files.path, target)
            self.layers = list(self.drafter.config.fuse_layers)
        elif files.kind == BASELINE_KIND:
            self.baseline = Baseline.load(files.path, config)
            self.layers = self.baseline.layers
        elif files.kind == "constant":
            self.layers, self.median = [], float(config["median"])
        else:
            raise ValueError(f"predictor kind {files.kind!r} cannot predict for new prompts")

    @property
    def name(self) -> str:
        return self.files.name

    @property
    def manifest(self) -> dict:
        return self.files.manifest

    def predict(self, prompts: pd.DataFrame | Iterable[str], on_progress: Progress = no_progress) -> pd.DataFrame:
        """Predictions for ``prompts`` (any iterable of texts, or a frame with ``prompt`` and optionally ``id``;
        :func:`prompt_table`): :func:`predict_prompts`'s columns without ``predictor``."""
        return predict_prompts(self.target, prompts, [self], on_progress).drop(columns="predictor")

    @torch.no_grad()
    def from_prefills(self, prefills: Sequence[Prefill]) -> pd.DataFrame:
        """``predicted_tokens`` (and quantile columns for soft-label heads) of each prefilled prompt."""
        if self.head is not None:
            x = torch.stack([self._head_input(p) for p in prefills])
            probs = torch.softmax(self.head(x.float()), dim=-1)
            return _with_quantiles((probs @ self.head.centers).numpy(), probs, self.head)
        if self.probe is not None:
            x = torch.cat([step_features([p.features.hidden[lay] for lay in self.layers],
                                         np.array([len(p.features) - 1]), self.view) for p in prefills])
            return pd.DataFrame({"predicted_tokens": self.probe.predict(x).numpy()})
        if self.drafter is not None:
            return pd.DataFrame({"predicted_tokens": [self._drafter_length(p) for p in prefills]})
        if self.files.kind == BASELINE_KIND:
            return self.baseline.predict(prefills)
        return pd.DataFrame({"predicted_tokens": np.full(len(prefills), self.median)})

    def _head_input(self, prefill: Prefill) -> torch.Tensor:
        f, c = prefill.features, prefill.content_start
        pooled = pool(f.hidden[self.layers[0]][c:], f.entropy[c:], self.pooling, self.alpha)
        if self.files.kind == PLP_KIND:  # step 0: nothing generated yet
            return plp_inputs(pooled, torch.zeros(0, pooled.shape[0]), [0])[0]
        return pooled

    def _drafter_length(self, prefill: Prefill) -> float:
        """The length head after the prompt, the next token being the target's greedy first answer token."""
        f = prefill.features
        first = f.topk_ids[-1, 0].reshape(1)
        next_ids = torch.cat([f.input_ids[1:], first]).unsqueeze(0)
        hidden = [f.hidden[lay].float().unsqueeze(0) for lay in self.layers]
        rep, _ = self.drafter(hidden, next_ids)
        return float(length_from_log(self.drafter.predict_log_length(rep[0, -1:]))[0])


def prefill(target: TargetModel, prompts: Sequence[str], ids: Sequence[list[int]], layers: Sequence[int],
            on_progress: Progress = no_progress) -> list[Prefill]:
    """One forward pass over each chat-formatted prompt's ``ids`` (in batches), keeping ``layers``' states."""
    layers = sorted(set(layers)) or [target.num_layers]
    out: list[Prefill] = []
    for start in range(0, len(ids), BATCH):
        chunk = ids[start:start + BATCH]
        out += [Prefill(p, f, target.content_start(i))
                for p, f, i in zip(prompts[start:start + BATCH], target.features(chunk, layers), chunk)]
        on_progress(len(out), len(ids), "prefilling prompts")
    return out


def predict_prompts(target: TargetModel, prompts: pd.DataFrame | Iterable[str],
                    predictors: Sequence[LengthPredictor], on_progress: Progress = no_progress) -> pd.DataFrame:
    """One row per (prompt, predictor): ``id``, ``predictor``, ``predicted_tokens`` and, for soft-label heads,
    the :data:`QUANTILE_COLUMNS` (empty for the others), plus ``prompt_tokens``. ``prompts``: see
    :func:`prompt_table`; every prompt is checked before any forward pass."""
    frame = prompt_table(prompts)
    ids = chat_ids(target, frame)
    prefills = prefill(target, frame["prompt"].tolist(), ids, [lay for p in predictors for lay in p.layers],
                       on_progress)
    parts = []
    for predictor in predictors:
        part = predictor.from_prefills(prefills)
        part.insert(0, "predictor", predictor.name)
        part.insert(0, "id", frame["id"].to_numpy())
        part["prompt_tokens"] = [len(p.features) for p in prefills]
        parts.append(part)
    columns = ["id", "predictor", "predicted_tokens", *QUANTILE_COLUMNS, "prompt_tokens"]
    return pd.concat(parts, ignore_index=True).reindex(columns=columns)


def write_predictions(frame: pd.DataFrame, path: str | Path | TextIO) -> None:
    """The predictions as CSV (tokens rounded to 0.1) to a stream, or to a file written whole."""
    if not isinstance(path, str | Path):
        frame.round(1).to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL)
        return
    with atomic_path(path) as temporary:
        frame.round(1).to_csv(temporary, index=False, quoting=csv.QUOTE_MINIMAL)


def interval_metrics(store: Store, dataset: str) -> Callable[[PredictorFiles], dict]:
    """For :func:`~lenscope.jobs.predictors.catalog.ship_predictors`: how often the q10-q90 interval of a head with
    a length distribution (the soft-label heads, SSJF-MC, S3) holds the true length of the finished test runs of
    ``dataset`` (step 0), and its median width."""
    tables: dict[tuple[int, float], FeatureTable] = {}

    def inputs(files: PredictorFiles) -> tuple[SoftLabelHead, torch.Tensor, np.ndarray] | None:
        """The head, its inputs on the test runs and their true lengths; None for a head without quantiles."""
        if files.kind == BASELINE_KIND and files.manifest["config"]["baseline"] in BUCKET_BASELINES:
            runs = dataset_runs(store, dataset)
            test = runs[runs["split"] == "test"]
            return (load_head(files.path)[0], prompt_embeddings(store, test["prompt"].tolist()),
                    test["output_tokens"].to_numpy())
        if files.kind not in (STATIC_KIND, PLP_KIND):
            return None
        head, meta = load_head(files.path)
        key = (int(meta["layer"]), float(meta["alpha"]))
        if key not in tables:
            tables[key] = feature_table(store, dataset, *key)
        table = tables[key]
        test = torch.tensor((table.runs["split"] == "test").to_numpy())
        x = table.prompt_matrix(meta.get("pooling", meta.get("prompt_pooling", "egtp")))[test]
        if files.kind == PLP_KIND:
            x = torch.stack([plp_inputs(row, torch.zeros(0, row.shape[0]), [0])[0] for row in x])
        return head, x, table.lengths()[test].numpy()

    def measure(files: PredictorFiles) -> dict:
        found = inputs(files)
        if found is None:
            return {}
        head, x, y = found
        with torch.no_grad():
            q = bin_quantiles(torch.softmax(head(x.float()), dim=-1), head.bins, (QUANTILES[0], QUANTILES[-1]))
        return {"interval": f"{QUANTILE_COLUMNS[0]}..{QUANTILE_COLUMNS[-1]}",
                "interval_coverage": float(np.mean((y >= q[:, 0]) & (y <= q[:, 1]))),
                "interval_median_width": float(np.median(q[:, 1] - q[:, 0])), "interval_runs": int(len(y))}
    return measure
