"""The length predictors a user names by a short word (``egtp``, ``mean``, ``max``, ``last``, ``plp``, ``probe``,
``drafter``, ``constant``): the study's trained ones shipped under ``data/predictors/`` with a manifest (config,
training data hash, metrics, weight hashes checked on load), or the ones trained on a dataset of the store.

A shipped predictor is a folder ``data/predictors/NAME/`` holding its weight files and ``manifest.json``;
:func:`ship_predictors` writes them from a store (``python -m lenscope ship-predictors``, also the last step of
``study --size full``) and :func:`load_predictor` reads either kind back.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from safetensors.torch import load_file, save_file

from lenscope.analysis.baselines import PAPERS
from lenscope.analysis.core.metrics import prediction_metrics
from lenscope.jobs.drafter.training import drafter_name, probe_name
from lenscope.jobs.egtp.heads import DEFAULT_LAYER, PLP_KIND, STATIC_KIND, predictor_name
from lenscope.jobs.predictors.baselines import BASELINE_KIND, BASELINES, DESCRIPTIONS, baseline_name
from lenscope.jobs.results.crossval import runs_digest
from lenscope.jobs.runs.datasets import all_runs, dataset_runs
from lenscope.jobs.scheduler.replay import training_median
from lenscope.store.settings import SHIPPED_DATA
from lenscope.store.store import Store

SHIPPED_DIR = SHIPPED_DATA / "predictors"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "lenscope-predictor/1"
PROBE_LAYER = 15  # the single-layer probe chosen on validation in the study (README, claims rerun)
REBUILD = "python -m lenscope study --size full"
PROMPT_BASELINES = tuple(b for b in BASELINES if b != "pia")  # PiA generates an answer to predict: not shipped


# Where the catalog's own predictors come from (the baselines' papers are in lenscope.analysis.baselines.PAPERS).
EGTP_PAPER = "EGTP: 'Predicting LLM Output Length via Entropy-Guided Representations', ICLR 2026"
OUTLETS_PAPER = "OUTLETS: 'Output-Length Prediction from Speculative Decoding Backbones', arXiv:2609.01068"


@dataclass(frozen=True)
class CatalogEntry:
    """One short predictor name: its store kind, the store name it has on a dataset, what it is and its source (the
    paper it comes from; the CLI's help and the UI show both)."""

    name: str
    kind: str
    store_name: Callable[[str], str]
    description: str
    source: str = ""


def _static(pooling: str, words: str) -> CatalogEntry:
    return CatalogEntry(pooling, STATIC_KIND, lambda d: predictor_name(STATIC_KIND, d, DEFAULT_LAYER, pooling),
                        f"static soft-label head on {words} of the prompt's layer-{DEFAULT_LAYER} states (EGTP paper)",
                        EGTP_PAPER + (" (its pooling ablation)" if pooling != "egtp" else ""))


CATALOG: dict[str, CatalogEntry] = {e.name: e for e in (
    _static("egtp", "the entropy-weighted mean"),
    _static("mean", "the mean"),
    _static("max", "the element-wise max"),
    _static("last", "the last token"),
    CatalogEntry("plp", PLP_KIND, lambda d: predictor_name(PLP_KIND, d, DEFAULT_LAYER),
                 "progressive remaining-length head (PLP), here at step 0: the prompt alone", EGTP_PAPER),
    CatalogEntry("probe", "probe", lambda d: probe_name(d, PROBE_LAYER, "regression"),
                 f"MLP probe on the target's layer-{PROBE_LAYER} state at the prompt's last token (OUTLETS' baseline)",
                 OUTLETS_PAPER + " (its probe baseline)"),
    CatalogEntry("drafter", "drafter", lambda d: drafter_name(d, "outlets"),
                 "OUTLETS drafter's length head after the prompt and the target's greedy first token", OUTLETS_PAPER),
    *(CatalogEntry(b, BASELINE_KIND, lambda d, b=b: baseline_name(b, d), DESCRIPTIONS[b], PAPERS[b])
      for b in PROMPT_BASELINES),
    CatalogEntry("constant", "constant", lambda d: f"constant:{d}",
                 "the training runs' median length for every prompt (the reference every predictor must beat)",
                 "lenscope's reference"),
)}
SOFT_LABEL_KINDS = (STATIC_KIND, PLP_KIND)


def catalog_text(separator: str = "; ") -> str:
    """One line a predictor (what it is, and its source), for help texts."""
    return separator.join(f"{e.name}: {e.description}" + (f" [{e.source}]" if e.source else "")
                          for e in CATALOG.values())


def entry(name: str) -> CatalogEntry:
    """The catalog entry of ``name``; ValueError listing the names otherwise."""
    if name not in CATALOG:
        raise ValueError(f"unknown predictor {name!r}; choose from {', '.join(CATALOG)}")
    return CATALOG[name]


@dataclass(frozen=True)
class PredictorFiles:
    """A predictor ready to load: its short name, kind, folder (or file) of weights and manifest."""

    name: str
    kind: str
    path: Path | None
    manifest: dict

    @property
    def model(self) -> str:
        return self.manifest["model"]

    @property
    def source(self) -> str:
        return self.manifest.get("source", "shipped")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_file(path: Path, expected: str, owner: str, restore: str) -> None:
    """ValueError unless ``path`` exists with the SHA-256 ``expected`` its manifest records; ``owner`` names what
    lacks a missing file, ``restore`` says how to get it back."""
    if not path.is_file():
        raise ValueError(f"{owner} lacks {path.name}; restore it with {restore}")
    if sha256(path) != expected:
        raise ValueError(f"{path} does not match the hash in its manifest (changed or damaged); restore it with "
                         f"{restore}")


def check_files(folder: Path, manifest: dict) -> None:
    """ValueError unless every weight file the manifest lists is in ``folder`` with the hash it records."""
    for file, expected in manifest.get("files", {}).items():
        verify_file(folder / file, expected, f"shipped predictor {folder.name!r}",
                    f"`git checkout data/predictors` or rebuild with `{REBUILD}`")


def shipped_names(root: Path = SHIPPED_DIR) -> list[str]:
    """Short names of the predictors shipped under ``root``, in catalog order."""
    return [n for n in CATALOG if (root / n / MANIFEST).is_file()]


def shipped_predictor(name: str, root: Path = SHIPPED_DIR) -> PredictorFiles:
    """The shipped predictor ``name`` with its files checked against the manifest's hashes."""
    entry(name)
    folder = root / name
    if not (folder / MANIFEST).is_file():
        shipped = ", ".join(shipped_names(root)) or "none"
        raise ValueError(f"no shipped predictor {name!r} under {root} (shipped: {shipped}); train it with "
                         f"`{REBUILD}` or pick one with --dataset")
    manifest = json.loads((folder / MANIFEST).read_text())
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{folder / MANIFEST} is not a {MANIFEST_FORMAT} manifest")
    check_files(folder, manifest)
    return PredictorFiles(name, manifest["kind"], folder, manifest)


def _training_data(store: Store, dataset: str) -> dict:
    """Which runs a predictor of ``dataset`` was trained on: the dataset's runs and its train split (censored runs
    are left out of training unless the predictor's config says ``include_censored``), with their digests."""
    runs = all_runs(store, dataset)
    train = runs[runs["split"] == "train"]
    return {"dataset": dataset, "runs": len(runs), "train_runs": len(train),
            "train_finished": int((~train["censored"]).sum()),
            "runs_digest": runs_digest(runs), "train_digest": runs_digest(train)}


def _model(store: Store, dataset: str) -> str:
    runs = store.runs_frame(dataset)
    if runs.empty:
        raise ValueError(f"dataset {dataset!r} has no runs")
    return store.model_source(int(runs["model_id"].iloc[0]))


def store_predictor(store: Store, name: str, dataset: str) -> PredictorFiles:
    """Predictor ``name`` as trained on ``dataset`` in the store (its artifact and registry row)."""
    spec = entry(name)
    manifest = {"format": MANIFEST_FORMAT, "name": name, "kind": spec.kind, "source": f"store dataset {dataset!r}",
                "model": _model(store, dataset), "description": spec.description,
                "training_data": _training_data(store, dataset)}
    if spec.kind == "constant":
        median = training_median(store, dataset)
        runs = dataset_runs(store, dataset)
        metrics = prediction_metrics(runs.assign(step=0, predicted=median, true=runs["output_tokens"]))
        return PredictorFiles(name, spec.kind, None, {**manifest, "config": {"median": median}, "metrics": metrics})
    frame = store.predictors_frame(spec.kind)
    row = frame[frame["name"] == spec.store_name(dataset)]
    if row.empty:
        raise ValueError(f"no {name!r} predictor trained on dataset {dataset!r} (looked for "
                         f"{spec.store_name(dataset)!r}); train it with `python -m lenscope study` or leave out "
                         "--dataset to use the shipped one")
    row = row.iloc[0]
    return PredictorFiles(name, spec.kind, Path(row["artifact_path"]),
                          {**manifest, "store_name": row["name"], "config": row["config"], "metrics": row["metrics"]})


def _source_hash(files: PredictorFiles) -> str | None:
    """Hash of a store predictor's main weight file (None for the constant): what a shipped copy was made from."""
    if files.path is None:
        return None
    if files.path.is_file():
        return sha256(files.path)
    return sha256(next(p for p in sorted(files.path.iterdir()) if p.suffix == ".safetensors"))


def shipped_fresh(store: Store, dataset: str, root: Path = SHIPPED_DIR) -> bool:
    """Whether every catalog predictor trained on ``dataset`` is shipped under ``root`` from its current weights
    and training runs."""
    for name in CATALOG:
        try:
            files = store_predictor(store, name, dataset)
        except ValueError:
            continue
        path = root / name / MANIFEST
        if not path.is_file():
            return False
        shipped = json.loads(path.read_text())
        if (shipped.get("source_sha256") != _source_hash(files)
                or shipped.get("training_data") != files.manifest["training_data"]
                or shipped.get("config") != _plain(files.manifest.get("config"))):
            return False
    return True


def _copy_weights(files: PredictorFiles, folder: Path) -> dict[str, str]:
    """Copy a store predictor's weights into ``folder`` (a drafter's in float16); {file: sha256}."""
    folder.mkdir(parents=True, exist_ok=True)
    source = files.path
    if source.is_file():  # a head saved as FILE.safetensors beside FILE.json
        stem = "model" if files.kind in SOFT_LABEL_KINDS else source.stem
        pairs = [(source, f"{stem}.safetensors"), (source.with_suffix(".json"), f"{stem}.json")]
    else:
        pairs = [(source / f.name, f.name) for f in sorted(source.iterdir()) if f.is_file()]
    for src, dst in pairs:
        if files.kind == "drafter" and dst.endswith(".safetensors"):
            state = load_file(str(src))
            save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in state.items()},
                      str(folder / dst))
        else:
            shutil.copyfile(src, folder / dst)
    return {dst: sha256(folder / dst) for _, dst in pairs}


def ship_predictors(store: Store, dataset: str, root: Path = SHIPPED_DIR,
                    extra_metrics: Callable[[PredictorFiles], dict] | None = None) -> list[str]:
    """Write every catalog predictor trained on ``dataset`` to ``root/NAME/`` (weights and manifest); returns
    the names written (those not trained are skipped). ``extra_metrics`` adds measured numbers to a manifest."""
    written = []
    for name in CATALOG:
        try:
            files = store_predictor(store, name, dataset)
        except ValueError:
            continue
        folder = root / name
        if folder.exists():
            shutil.rmtree(folder)
        hashes = {} if files.path is None else _copy_weights(files, folder)
        folder.mkdir(parents=True, exist_ok=True)
        manifest = {**files.manifest, "source": "shipped", "files": hashes, "rebuild": REBUILD,
                    "source_sha256": _source_hash(files),
                    "created": datetime.now(UTC).isoformat(timespec="seconds")}
        if extra_metrics is not None:
            manifest["metrics"] = {**(manifest.get("metrics") or {}), **extra_metrics(files)}
        (folder / MANIFEST).write_text(json.dumps(_plain(manifest), indent=1, sort_keys=True) + "\n")
        written.append(name)
    return written


def _plain(value):
    """``value`` with numpy scalars made JSON numbers (NaN becomes null)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def load_predictor_files(name: str, store: Store | None = None, dataset: str | None = None,
                         root: Path = SHIPPED_DIR) -> PredictorFiles:
    """Predictor ``name`` from the store's ``dataset`` when one is given, else the shipped one."""
    if dataset is None:
        return shipped_predictor(name, root)
    return store_predictor(store or Store(), name, dataset)


def shipped_summary(root: Path = SHIPPED_DIR) -> pd.DataFrame:
    """One row per shipped predictor: what it is, its test MAE at step 0 with the 95% CI and the paired difference
    to the constant, the q10-q90 interval's coverage, and the runs it was trained on (from the manifests)."""
    rows = []
    for name in shipped_names(root):
        m = json.loads((root / name / MANIFEST).read_text())
        metrics, data = m.get("metrics") or {}, m["training_data"]
        row = {"predictor": name, "test runs": metrics.get("n_runs"),
               "static MAE": metrics.get("static_mae"), "lo": metrics.get("static_mae_lo"),
               "hi": metrics.get("static_mae_hi"), "vs constant": metrics.get("static_vs_constant"),
               "vs constant lo": metrics.get("static_vs_constant_lo"),
               "vs constant hi": metrics.get("static_vs_constant_hi"),
               "interval coverage": metrics.get("interval_coverage"),
               "trained on": f"{data.get('train_finished', data['train_runs'])} finished train runs of "
                             f"{data['dataset']!r}", "what": m["description"]}
        rows.append(row)
    return pd.DataFrame(rows)


def available(store: Store | None = None, dataset: str | None = None, root: Path = SHIPPED_DIR) -> pd.DataFrame:
    """The catalog with, for each name, whether it is shipped (and on ``dataset`` of the store, when given)."""
    rows = []
    for name, spec in CATALOG.items():
        row = {"predictor": name, "description": spec.description, "shipped": (root / name / MANIFEST).is_file()}
        if dataset is not None:
            names = set((store or Store()).predictors_frame(spec.kind)["name"])
            row[f"on {dataset}"] = spec.kind == "constant" or spec.store_name(dataset) in names
        rows.append(row)
    return pd.DataFrame(rows)

