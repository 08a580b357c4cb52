"""The SHA-256 of a trained predictor's files, recorded when its store row is saved and checked when it loads.

Training code (EGTP and PLP heads, probes, drafters, baselines) saves a predictor's row with
:func:`with_artifact_hashes`; :func:`lenscope.jobs.predictors.catalog.store_predictor` refuses an artifact whose
files differ from them. Kept apart from the catalog, which imports the training code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lenscope.models.atomic_files import is_temporary

ARTIFACT_FILES = "artifact_files"  # the config key of a stored predictor's {file name: sha256}


def sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path`` (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def artifact_hashes(path: Path) -> dict[str, str]:
    """``{file name: sha256}`` of an artifact: every file of a folder (but a killed write's temporary file), or a head
    file and its ``.json`` beside it."""
    path = Path(path)
    files = sorted(path.iterdir()) if path.is_dir() else [path, path.with_suffix(".json")]
    return {f.name: sha256(f) for f in files if f.is_file() and not is_temporary(f)}


def with_artifact_hashes(config: dict, path: Path) -> dict:
    """``config`` of a predictor row with the hashes of its artifact at ``path`` (:func:`artifact_hashes`)."""
    return {**config, ARTIFACT_FILES: artifact_hashes(path)}
