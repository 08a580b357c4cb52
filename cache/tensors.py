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


HALF_SAFE = 32768.0  # rows whose largest |value| exceeds this are scaled into float16's range (max 65504)


def pack_hidden(hidden: dict[int, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hidden states ``{layer: [T, d]}`` as float16 tensors ``hidden.<layer>``. A row (token) whose largest
    magnitude would overflow float16 is divided by a power of two, stored in ``hidden.<layer>.scale``
    (exact, so other rows keep full float16 precision); layers that need no scaling store none."""
    out: dict[str, torch.Tensor] = {}
    for layer, states in hidden.items():
        states = states.float()
        peak = states.abs().amax(-1) if states.numel() else states.new_zeros(states.shape[0])
        exponent = torch.ceil(torch.log2(peak.clamp(min=HALF_SAFE) / HALF_SAFE))
        if bool((exponent > 0).any()):
            scale = torch.exp2(exponent)
            out[f"hidden.{layer}.scale"] = scale
            states = states / scale[:, None]
        out[f"hidden.{layer}"] = states.half()
    return out


def unpack_hidden(tensors: dict[str, torch.Tensor]) -> dict[int, torch.Tensor]:
    """Float32 hidden states ``{layer: [T, d]}`` back from :func:`pack_hidden`'s tensors."""
    hidden = {}
    for key, value in tensors.items():
        parts = key.split(".")
        if parts[0] == "hidden" and len(parts) == 2:
            scale = tensors.get(f"{key}.scale")
            hidden[int(parts[1])] = value.float() if scale is None else value.float() * scale[:, None]
    return hidden


def hidden_key_filter(layers) -> Callable[[str], bool]:
    """Key filter for :meth:`TensorStore.get` that loads every array but only the given layers' states."""
    wanted = {f"hidden.{layer}" for layer in layers}
    return lambda key: not key.startswith("hidden.") or key.removesuffix(".scale") in wanted
