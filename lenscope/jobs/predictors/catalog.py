"""The length predictors a user names by a short word (``egtp``, ``mean``, ``max``, ``last``, ``plp``, ``probe``,
``drafter``, ``constant``): the study's trained ones shipped under ``data/predictors/`` with a manifest (config,
training data hash, metrics, weight hashes checked on load), or the ones trained on a dataset of the store.

A shipped predictor is a folder ``data/predictors/NAME/`` holding its weight files and ``manifest.json``;
:func:`ship_predictors` writes them from a store (``python -m lenscope ship-predictors``, also the last step of
``study --size full``) and :func:`load_predictor` reads either kind back.

Loading either kind requires a list of every file its loader reads with its SHA-256 (a shipped predictor's
manifest; a stored one's row, recorded when it was trained): a file unlisted, missing or different, a listed file
that is absent, an unlisted weight or config file in the predictor's own folder, or a manifest that is not one, is
refused naming the file and how to restore it.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from safetensors.torch import load_file, save_file

from lenscope.analysis.baselines import PAPERS
from lenscope.analysis.baselines.ltr import CALIBRATION_FILE
from lenscope.analysis.core.metrics import prediction_metrics
from lenscope.analysis.core.safe_files import load_json_file
from lenscope.analysis.drafter.probes import CONFIG_FILE, WEIGHTS_FILE
from lenscope.jobs.drafter.training import drafter_name, probe_name
from lenscope.jobs.egtp.heads import DEFAULT_LAYER, PLP_KIND, STATIC_KIND, predictor_name
from lenscope.jobs.predictors.artifacts import ARTIFACT_FILES, sha256
from lenscope.jobs.predictors.baselines import BASELINE_KIND, BASELINES, DESCRIPTIONS, baseline_name
from lenscope.jobs.results.crossval import runs_digest
from lenscope.jobs.runs.datasets import all_runs, dataset_runs
from lenscope.jobs.scheduler.replay import training_median
from lenscope.models.atomic_files import atomic_path, is_temporary, write_text
from lenscope.models.drafter import CONFIG_FILE as DRAFTER_CONFIG
from lenscope.models.drafter import WEIGHTS_FILE as DRAFTER_WEIGHTS
from lenscope.store.settings import SHIPPED_DATA
from lenscope.store.store import Store

SHIPPED_DIR = SHIPPED_DATA / "predictors"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "lenscope-predictor/1"
PROBE_LAYER = 15  # the single-layer probe chosen on validation in the study (README, claims rerun)
REBUILD = "python -m lenscope study --size full"
RESTORE = f"`git checkout data/predictors` or rebuild with `{REBUILD}`"
MANIFEST_BYTES = 1 << 20  # a manifest is a few KB
SHIPPED_HEAD = "model.safetensors"  # a shipped soft-label head (beside model.json)
BASELINE_HEAD = "head.safetensors"  # the bucket head of SSJF-MC and S3 (beside head.json)
BUCKET_BASELINES = ("ssjf-mc", "s3")
LOADABLE_SUFFIXES = (".json", ".safetensors")  # what a predictor's loader reads: its weights and configs
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# The fields every manifest holds and their JSON type.
MANIFEST_FIELDS = {"kind": str, "model": str, "description": str, "files": dict, "config": dict,
                   "training_data": dict}
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
    if not isinstance(name, str):
        raise TypeError(f"a predictor name is a str (one of {', '.join(CATALOG)}), not {type(name).__name__}")
    if name not in CATALOG:
        raise ValueError(f"unknown predictor {name!r}; choose from {', '.join(CATALOG)}")
    return CATALOG[name]


def predictor_list(predictors: str | Iterable[str]) -> list[str]:
    """The catalog names ``predictors`` gives, one name or several (each checked, a repeated one kept once):
    TypeError for anything but a name or names, ValueError for none or an unknown one."""
    if isinstance(predictors, str):
        predictors = [predictors]
    elif not isinstance(predictors, Iterable) or isinstance(predictors, bytes):
        raise TypeError(f"predictors must be a predictor name or a list of them, not {type(predictors).__name__}")
    names = list(predictors)
    if not names:
        raise ValueError("name at least one predictor")
    for name in names:
        entry(name)
    return list(dict.fromkeys(names))


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

    @property
    def folder(self) -> Path | None:
        """The folder its files lie in (a head saved as a file lies in a folder shared with other heads)."""
        return None if self.path is None else self.path if self.path.is_dir() else self.path.parent

    @property
    def reads(self) -> list[str]:
        """The names, in :attr:`folder`, of the files :class:`~lenscope.jobs.predictors.predict.LengthPredictor`
        reads (the weights first)."""
        if self.path is None or self.kind == "constant":
            return []
        if self.kind in SOFT_LABEL_KINDS:
            head = self.path if self.path.is_file() else Path(SHIPPED_HEAD)
            return [head.name, head.with_suffix(".json").name]
        if self.kind == "drafter":
            return [DRAFTER_WEIGHTS, DRAFTER_CONFIG]
        baseline = self.manifest["config"].get("baseline") if self.kind == BASELINE_KIND else None
        if baseline in BUCKET_BASELINES:
            return [BASELINE_HEAD, Path(BASELINE_HEAD).with_suffix(".json").name]
        return [WEIGHTS_FILE, CONFIG_FILE, *([CALIBRATION_FILE] if baseline == "ltr" else [])]


def verify_file(path: Path, expected: str, owner: str, restore: str) -> None:
    """ValueError unless ``path`` exists with the SHA-256 ``expected`` its manifest records; ``owner`` names what
    lacks a missing file, ``restore`` says how to get it back."""
    if not path.is_file():
        raise ValueError(f"{owner} lacks {path.name}; restore it with {restore}")
    if sha256(path) != expected:
        raise ValueError(f"{path} does not match the hash in its manifest (changed or damaged); restore it with "
                         f"{restore}")


def check_files(files: PredictorFiles, listing: str, owner: str, restore: str) -> None:
    """ValueError unless ``listing`` (its manifest, or its store row) lists every file the predictor's loader
    reads, each listed file is in its folder with the SHA-256 it records, and a folder of its own holds no unlisted
    weight or config file. ``owner`` names the predictor, ``restore`` says how to get a good copy back."""
    listed = files.manifest["files"]
    unlisted = [name for name in files.reads if name not in listed]
    if unlisted:
        raise ValueError(f"{listing} does not list {unlisted[0]}, which {owner} loads; restore it with {restore}")
    if files.folder is None:
        if listed:
            raise ValueError(f"{listing} lists {next(iter(listed))}, but {owner} has no files")
        return
    for file, expected in listed.items():
        verify_file(files.folder / file, expected, owner, restore)
    if files.path.is_dir():
        extra = sorted(f.name for f in files.folder.iterdir() if f.is_file() and f.suffix in LOADABLE_SUFFIXES
                       and f.name != MANIFEST and f.name not in listed and not is_temporary(f))
        if extra:
            raise ValueError(f"{files.folder / extra[0]} is not listed in {listing}: remove it, or restore "
                             f"{owner} with {restore}")


def _manifest_problem(manifest: object, kind: str) -> str | None:
    """Why ``manifest`` is not a predictor manifest of ``kind`` (its fields, file list and config), or None."""
    if not isinstance(manifest, dict):
        return "is not a JSON object"
    if manifest.get("format") != MANIFEST_FORMAT:
        return f"is not a {MANIFEST_FORMAT} manifest"
    for field, type_ in MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(field), type_):
            return f"{field} must be a JSON {'object' if type_ is dict else 'text'}, not {manifest.get(field)!r:.40}"
    if manifest["kind"] != kind:
        return f"kind is {manifest['kind']!r:.40}, not {kind!r}"
    for file, digest in manifest["files"].items():
        if Path(file).name != file or file in (".", "..", MANIFEST):
            return f"files lists {file!r:.60}, not a file name of the predictor's folder"
        if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
            return f"files.{file} must be a SHA-256 (64 hex digits), not {digest!r:.40}"
    baseline = manifest["config"].get("baseline")
    if kind == BASELINE_KIND and baseline not in PROMPT_BASELINES:
        return f"config.baseline must be one of {', '.join(PROMPT_BASELINES)}, not {baseline!r:.40}"
    median = manifest["config"].get("median")
    if kind == "constant" and (type(median) not in (int, float) or not math.isfinite(median)):
        return f"config.median must be a number, not {median!r:.40}"
    return None


def read_manifest(path: Path, kind: str) -> dict:
    """The predictor manifest at ``path`` of a predictor of ``kind``; a one-line ValueError naming ``path`` when
    it is not JSON or not such a manifest."""
    manifest = load_json_file(path, MANIFEST_BYTES, "predictor manifest")
    problem = _manifest_problem(manifest, kind)
    if problem:
        raise ValueError(f"predictor manifest {str(path)!r} {problem}" if problem.startswith("is ")
                         else f"predictor manifest {str(path)!r}: {problem}")
    return manifest


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
    manifest = read_manifest(folder / MANIFEST, CATALOG[name].kind)
    files = PredictorFiles(name, manifest["kind"], folder, manifest)
    check_files(files, str(folder / MANIFEST), f"shipped predictor {name!r}", RESTORE)
    return files


def _training_data(store: Store, dataset: str) -> dict:
    """Which runs a predictor of ``dataset`` was trained on: the dataset's runs and its train split (censored runs
    are left out of training unless the predictor's config says ``include_censored``), with their digests."""
    runs = all_runs(store, dataset)
    train = runs[runs["split"] == "train"]
    return {"dataset": dataset, "runs": len(runs), "train_runs": len(train),
            "train_finished": int((~train["censored"]).sum()),
            "runs_digest": runs_digest(runs), "train_digest": runs_digest(train)}


class NoPredictor(ValueError):
    """The store holds no predictor of that name on that dataset (nothing trained, or no runs)."""


def _model(store: Store, dataset: str) -> str:
    runs = store.runs_frame(dataset)
    if runs.empty:
        raise NoPredictor(f"dataset {dataset!r} has no runs")
    return store.model_source(int(runs["model_id"].iloc[0]))


def retrain_command(name: str, dataset: str) -> str:
    """The command that trains predictor ``name`` on store dataset ``dataset`` again."""
    kind = entry(name).kind
    command = {STATIC_KIND: f"train-egtp --pooling {name}", PLP_KIND: "train-plp",
               "probe": f"train-probe --layer {PROBE_LAYER}", "drafter": "train-drafter",
               BASELINE_KIND: f"train-baselines --only {name}"}.get(kind, "study")
    return f"`python -m lenscope {command} --dataset {dataset}`"


def store_predictor(store: Store, name: str, dataset: str) -> PredictorFiles:
    """Predictor ``name`` as trained on ``dataset`` in the store (its artifact and registry row), its files checked
    against the hashes its row recorded when it was trained (a row saved without them is refused: retrain it).
    :class:`NoPredictor` when none was trained."""
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
        raise NoPredictor(f"no {name!r} predictor trained on dataset {dataset!r} (looked for "
                          f"{spec.store_name(dataset)!r}); train it with `python -m lenscope study` or leave out "
                          "--dataset to use the shipped one")
    row = row.iloc[0]
    owner, retrain = f"stored predictor {row['name']!r}", retrain_command(name, dataset)
    config = dict(row["config"]) if isinstance(row["config"], dict) else {}
    hashes = config.pop(ARTIFACT_FILES, None)
    if hashes is None:
        raise ValueError(f"{owner} was trained before lenscope recorded the hashes of a predictor's files, so its "
                         f"files cannot be checked; train it again with {retrain}")
    manifest = {**manifest, "store_name": row["name"], "config": config, "metrics": row["metrics"], "files": hashes}
    problem = _manifest_problem(manifest, spec.kind)
    if problem:
        raise ValueError(f"the store's row of {owner}: {problem}; train it again with {retrain}")
    files = PredictorFiles(name, spec.kind, Path(row["artifact_path"]), manifest)
    check_files(files, f"the store's row of {owner}", owner, f"{retrain} (the files differ from those it trained)")
    return files


def _source_hash(files: PredictorFiles) -> str | None:
    """Hash of a store predictor's main weight file (None for the constant): what a shipped copy was made from. Read
    from its row's hashes, which :func:`store_predictor` has just checked against the file (no second read)."""
    return None if files.path is None else files.manifest["files"][files.reads[0]]


def shipped_fresh(store: Store, dataset: str, root: Path = SHIPPED_DIR) -> bool:
    """Whether every catalog predictor trained on ``dataset`` is shipped under ``root`` from its current weights
    and training runs."""
    for name in CATALOG:
        try:
            files = store_predictor(store, name, dataset)
        except NoPredictor:
            continue
        path = root / name / MANIFEST
        try:
            shipped = read_manifest(path, files.kind)
        except ValueError:  # missing or damaged: not shipped from these weights
            return False
        if (shipped.get("source_sha256") != _source_hash(files)
                or shipped.get("training_data") != files.manifest["training_data"]
                or shipped.get("config") != _plain(files.manifest.get("config"))):
            return False
    return True


def _copy_weights(files: PredictorFiles, folder: Path) -> dict[str, str]:
    """Copy the files of a store predictor listed in its row into ``folder`` (a drafter's weights in float16), each
    file written whole; {file: sha256}."""
    source = files.path
    if source.is_file():  # a head saved as FILE.safetensors beside FILE.json
        stem = Path(SHIPPED_HEAD).stem if files.kind in SOFT_LABEL_KINDS else source.stem
        pairs = [(source, f"{stem}.safetensors"), (source.with_suffix(".json"), f"{stem}.json")]
    else:
        pairs = [(source / name, name) for name in sorted(files.manifest["files"])]
    for src, dst in pairs:
        with atomic_path(folder / dst) as temporary:
            if files.kind == "drafter" and dst.endswith(".safetensors"):
                state = load_file(str(src))
                save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in state.items()},
                          str(temporary))
            else:
                shutil.copyfile(src, temporary)
    return {dst: sha256(folder / dst) for _, dst in pairs}


def ship_predictors(store: Store, dataset: str, root: Path = SHIPPED_DIR,
                    extra_metrics: Callable[[PredictorFiles], dict] | None = None) -> list[str]:
    """Write every catalog predictor trained on ``dataset`` to ``root/NAME/`` (weights and manifest); returns
    the names written (those not trained are skipped). ``extra_metrics`` adds measured numbers to a manifest.

    Each file is written whole (:mod:`lenscope.models.atomic_files`), the manifest last, then files it does not
    list are removed: a stop midway leaves the old manifest, whose hashes refuse any new weight file beside it."""
    written = []
    for name in CATALOG:
        try:
            files = store_predictor(store, name, dataset)
        except NoPredictor:
            continue
        folder = root / name
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, not a predictor folder; remove it")
        folder.mkdir(parents=True, exist_ok=True)
        hashes = {} if files.path is None else _copy_weights(files, folder)
        manifest = {**files.manifest, "source": "shipped", "files": hashes, "rebuild": REBUILD,
                    "source_sha256": _source_hash(files),
                    "created": datetime.now(UTC).isoformat(timespec="seconds")}
        if extra_metrics is not None:
            manifest["metrics"] = {**(manifest.get("metrics") or {}), **extra_metrics(files)}
        write_text(folder / MANIFEST, json.dumps(_plain(manifest), indent=1, sort_keys=True) + "\n")
        for left in folder.iterdir():
            if left.is_dir():
                shutil.rmtree(left)
            elif left.name != MANIFEST and left.name not in hashes:
                left.unlink()
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
        m = read_manifest(root / name / MANIFEST, CATALOG[name].kind)
        metrics, data = m.get("metrics") or {}, m["training_data"]
        row = {"predictor": name, "test runs": metrics.get("n_runs"),
               "static MAE": metrics.get("static_mae"), "lo": metrics.get("static_mae_lo"),
               "hi": metrics.get("static_mae_hi"), "vs constant": metrics.get("static_vs_constant"),
               "vs constant lo": metrics.get("static_vs_constant_lo"),
               "vs constant hi": metrics.get("static_vs_constant_hi"),
               "interval coverage": metrics.get("interval_coverage"),
               "trained on": f"{data.get('train_finished', data.get('train_runs'))} finished train runs of "
                             f"{data.get('dataset')!r}", "what": m["description"]}
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

