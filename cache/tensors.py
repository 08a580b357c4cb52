"""Content-addressed tensor files: a dict of tensors saved as safetensors under its SHA-256."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save


def content_hash(tensors: dict[str, torch.Tensor]) -> tuple[str, bytes]:
    """SHA-256 of the safetensors serialisation of ``tensors`` (deterministic key order)."""
    blob = save({k: tensors[k].contiguous().cpu() for k in sorted(tensors)})
    return hashlib.sha256(blob).hexdigest(), blob


class TensorStore:
    """Writes each distinct tensor dict once, at ``root/<h[:2]>/<h>.safetensors``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}.safetensors"

    def put(self, tensors: dict[str, torch.Tensor]) -> tuple[str, Path]:
        """Store ``tensors``; returns (hash, path). Writing is atomic (temp file + rename)."""
        digest, blob = content_hash(tensors)
        path = self.path_for(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, path)
        return digest, path

    def get(self, digest: str, keys: Callable[[str], bool] | None = None) -> dict[str, torch.Tensor]:
        """Load the tensors stored under ``digest`` (only the names ``keys`` accepts, if given)."""
        path = self.path_for(digest)
        if not path.exists():
            raise FileNotFoundError(f"tensor file {path} is missing from the store")
        with safe_open(str(path), framework="pt") as fh:
            return {k: fh.get_tensor(k) for k in fh.keys() if keys is None or keys(k)}
