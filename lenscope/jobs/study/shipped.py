"""The study's results as small files under ``data/results/``, committed with the repository, so that a fresh
clone shows the 3,014-run study's numbers on every page before anything is computed.

:func:`publish_results` writes them from a store that holds the study (``python -m lenscope publish-results``,
also the last step of ``study --size full``); :func:`shipped_study` reads them back (hashes checked against the
manifest). A page shows them while the store holds no dataset of that name: a rebuilt study replaces them.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pandas as pd

from lenscope.analysis.results.leaderboard import FRAME_COLUMNS
from lenscope.jobs.predictors.catalog import REBUILD, sha256, verify_file
from lenscope.jobs.results.claims import claims_report, relabelled
from lenscope.jobs.results.crossval import runs_digest
from lenscope.jobs.study.results import StoreResults
from lenscope.models.atomic_files import atomic_gzip, write_text
from lenscope.models.target import TargetModel
from lenscope.store.settings import SHIPPED_DATA
from lenscope.store.store import Store

RESULTS_DIR = SHIPPED_DATA / "results"
MANIFEST = "manifest.json"
FORMAT = "lenscope-results/1"
EVIDENCE_RUNS = 40  # test runs whose tokens the shipped attribution scatter and bars show (numbers use all)
PUBLISH = "python -m lenscope publish-results --dataset study"
RUN_COLUMNS = ["run_id", "prompt_id", "source", "scenario", "task", "group", "fold", "split", "prompt_tokens",
               "output_tokens", "finished", "censored"]

# file -> what it holds (the manifest repeats it)
FILES = {
    "runs.csv.gz": "every run: scenario, split, fold, prompt and output tokens, finished (no text: the shipped "
                   "generations file has it)",
    "claims.json": "the papers' claims judged with paired CIs, cross-validated over folds and training seeds",
    "out_of_fold.csv.gz": "every cross-validated predictor's out-of-fold prediction of every run (steps 0..32 for "
                          "dynamic ones), averaged over its training seeds",
    "predictors.json": "each predictor trained on one split: its metrics with CIs",
    "results_frame.csv.gz": "the Results page's rows: every predictor on the test split, steps 0..32",
    "plp_curve.csv": "the PLP head's test MAE by observed step",
    "pooling_ablation.json": "static heads by pooling, with paired comparisons and head options",
    "attribution.json.gz": f"the attribution evidence test (tokens of {EVIDENCE_RUNS} test runs kept for the plots)",
    "drafter_ablation.json": "the OUTLETS drafter against its ablations and target probes",
    "speculative.json": "live speculative decoding: acceptance per drafting step and speed",
    "preset.json": "the scheduler preset (1 prefill + 3 decode) over seeds and workloads",
}


def _dump(path: Path, value) -> None:
    """JSON (gzipped for ``.gz``), or a frame as CSV (gzipped for ``.gz``), all or nothing (the same bytes for
    the same value)."""
    packed = path.suffix == ".gz"
    if isinstance(value, pd.DataFrame):
        text = value.to_csv(index=False, float_format="%.6g")
    else:
        text = json.dumps(value, indent=None if packed else 1, sort_keys=True, default=str, allow_nan=False)
    if packed:
        with atomic_gzip(path, mtime=0) as handle:
            handle.write(text.encode())
    else:
        write_text(path, text if isinstance(value, pd.DataFrame) else text + "\n")


def _finite(value):
    """``value`` with NaN and infinities as None (strict JSON)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _trimmed(evidence: tuple[dict, dict] | None) -> dict | None:
    """The evidence with the tokens of its first :data:`EVIDENCE_RUNS` test runs (the numbers cover all)."""
    if evidence is None:
        return None
    settings, payload = evidence
    return {"settings": settings, "payload": {**payload, "test_tokens": payload["test_tokens"][:EVIDENCE_RUNS]}}


def _pair(found: tuple[dict, dict] | None) -> dict | None:
    return None if found is None else {"settings": found[0], "payload": found[1]}


def source_signature(results: StoreResults) -> dict:
    """What published results were built from: the dataset's runs, its predictors and the claims' folds and seeds
    (results published from the same signature are up to date)."""
    claims = (results.claims() or {}).get("config", {})
    predictors = sorted(int(i) for i in results.predictors()["predictor_id"])
    return {"runs": runs_digest(results.runs()), "predictors": predictors,
            "claims": {k: claims.get(k) for k in ("folds", "seeds", "runs")},
            "evidence": results.evidence() is not None, "speculative": results.speculative() is not None}


def published_fresh(results: StoreResults, root: Path = RESULTS_DIR) -> bool:
    """Whether ``root`` holds results published from ``results`` as they are now."""
    path = root / MANIFEST
    return path.is_file() and json.loads(path.read_text()).get("signature") == source_signature(results)


def publish_results(results: StoreResults, target: TargetModel, root: Path = RESULTS_DIR) -> dict:
    """Write the results of a store's study under ``root`` and return the manifest. The claims are read back from
    their stored folds and seeds (``target``: the model PiA asks, whose answers are stored too), so the shipped
    claims and out-of-fold predictions come from one judgement."""
    store, dataset = results.store, results.dataset
    runs = results.runs()
    config = (results.claims() or {}).get("config")
    if config is None:
        raise ValueError(f"dataset {dataset!r} has no cross-validated claims; run `{REBUILD}` first")
    out_of_fold = claims_report(store, dataset, config["layer"], config["probe_layer"], config["folds"],
                                config["seeds"], target).out_of_fold()
    claims = results.claims()
    predictors = results.predictors()
    values = {
        "runs.csv.gz": runs[RUN_COLUMNS],
        "claims.json": claims,
        "out_of_fold.csv.gz": out_of_fold,
        "predictors.json": [{"predictor_id": int(r.predictor_id), "name": r.name, "kind": r.kind,
                             "config": r.config, "metrics": r.metrics} for r in predictors.itertuples()],
        "results_frame.csv.gz": results.results_frame()[FRAME_COLUMNS],
        "plp_curve.csv": results.plp_curve(),
        "pooling_ablation.json": results.pooling_ablation(),
        "attribution.json.gz": _trimmed(results.evidence()),
        "drafter_ablation.json": results.drafter_ablation(),
        "speculative.json": _pair(results.speculative()),
        "preset.json": results.preset(),
    }
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, value in values.items():
        path = root / name
        if value is None:
            path.unlink(missing_ok=True)
            continue
        _dump(path, value if isinstance(value, pd.DataFrame) else _finite(value))
        written[name] = {"sha256": sha256(path), "what": FILES[name]}
    manifest = {"format": FORMAT, "dataset": dataset, "model": store.model_source(int(runs["model_id"].iloc[0])),
                "layer": results.layer, "probe_layer": results.probe_layer, "caption": results.caption(),
                "runs": len(runs), "finished": int((~runs["censored"]).sum()),
                "prompts": int(runs["prompt_id"].nunique()), "test_runs": int((runs["split"] == "test").sum()),
                "created": datetime.now(UTC).isoformat(timespec="seconds"), "rebuild": REBUILD,
                "publish": PUBLISH, "files": written, "signature": source_signature(results)}
    write_text(root / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    _read_study.cache_clear()
    return manifest


@dataclass(frozen=True)
class ShippedStudy:
    """The results files of a study, read back; each getter returns None when that file was not shipped."""

    root: Path
    manifest: dict

    @property
    def dataset(self) -> str:
        return self.manifest["dataset"]

    @property
    def label(self) -> str:
        """What these numbers are, in one line a page can show above them."""
        m = self.manifest
        return (f"Shipped results of the {m['runs']:,}-run study (dataset {m['dataset']!r}: {m['finished']:,} finished "
                f"answers of {m['prompts']:,} prompts, {m['test_runs']:,} test runs) of {m['model']}, built "
                f"{m['created'][:10]}. Rebuild them in your store with `{m['rebuild']}`; a study in your store "
                "replaces them on every page.")

    def _path(self, name: str) -> Path | None:
        info = self.manifest["files"].get(name)
        if info is None:
            return None
        path = self.root / name
        verify_file(path, info["sha256"], "the shipped study's results",
                    f"`git checkout data/results` or rebuild with `{self.manifest['rebuild']}`")
        return path

    def absent(self, what: str) -> str:
        """What a page says when these results hold no ``what``."""
        return f"The shipped results hold no {what}; rebuild it with `{self.manifest['rebuild']}`."

    def json(self, name: str) -> dict | list | None:
        path = self._path(name)
        if path is None:
            return None
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return json.loads(raw)

    def frame(self, name: str) -> pd.DataFrame | None:
        path = self._path(name)
        return None if path is None else pd.read_csv(io.BytesIO(path.read_bytes()),
                                                     compression="gzip" if path.suffix == ".gz" else None)

    # the StudyResults interface
    @property
    def layer(self) -> int:
        return int(self.manifest["layer"])

    @property
    def probe_layer(self) -> int:
        return int(self.manifest["probe_layer"])

    def caption(self) -> str:
        return self.manifest["caption"] + f" (shipped results, built {self.manifest['created'][:10]})"

    def runs(self) -> pd.DataFrame:
        return self.frame("runs.csv.gz")

    def claims(self) -> dict | None:
        found = self.json("claims.json")
        return None if found is None else relabelled(found)

    def out_of_fold(self) -> pd.DataFrame | None:
        return self.frame("out_of_fold.csv.gz")

    def evidence(self) -> tuple[dict, dict] | None:
        found = self.json("attribution.json.gz")
        return None if found is None else (found["settings"], found["payload"])

    def pooling_ablation(self) -> dict | None:
        return self.json("pooling_ablation.json")

    def plp_curve(self) -> pd.DataFrame | None:
        return self.frame("plp_curve.csv")

    def predictors(self) -> pd.DataFrame:
        rows = self.json("predictors.json") or []
        return pd.DataFrame(rows, columns=["predictor_id", "name", "kind", "config", "metrics"])

    def results_frame(self) -> pd.DataFrame:
        frame = self.frame("results_frame.csv.gz")
        return pd.DataFrame(columns=FRAME_COLUMNS) if frame is None else frame

    def drafter_ablation(self) -> dict | None:
        return self.json("drafter_ablation.json")

    def speculative(self) -> tuple[dict, dict] | None:
        found = self.json("speculative.json")
        return None if found is None else (found["settings"], found["payload"])

    def preset(self) -> dict | None:
        return self.json("preset.json")


def shipped_study(root: Path | None = None) -> ShippedStudy | None:
    """The shipped results under ``root`` (default :data:`RESULTS_DIR`; None when there are none)."""
    return _read_study(root or RESULTS_DIR)


@cache
def _read_study(root: Path) -> ShippedStudy | None:
    path = root / MANIFEST
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} manifest; rebuild with `{PUBLISH}`")
    return ShippedStudy(root, manifest)


def shipped_for(store: Store) -> ShippedStudy | None:
    """The shipped study when ``store`` holds no dataset of its name (a study in the store replaces it)."""
    study = shipped_study()
    if study is None or study.dataset in set(store.datasets_frame()["name"]):
        return None
    return study

