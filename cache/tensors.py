"""Content-addressed tensor files: a dict of tensors saved as safetensors under its SHA-256, verified against
that hash whenever read (a truncated, altered or missing file raises :class:`DamagedTensorError`)."""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from safetensors.torch import load, save

SUFFIX = ".safetensors"
TEMP_SUFFIX = ".tmp"


def content_hash(tensors: dict[str, torch.Tensor]) -> tuple[str, bytes]:
    """SHA-256 of the safetensors serialisation of ``tensors`` (deterministic key order)."""
    blob = save({k: tensors[k].contiguous().cpu() for k in sorted(tensors)})
    return hashlib.sha256(blob).hexdigest(), blob


class DamagedTensorError(OSError):
    """A tensor file is missing, or its content no longer matches the hash it is stored under."""

    def __init__(self, digest: str, path: Path, problem: str) -> None:
        super().__init__(f"tensor file {path} is {problem}")
        self.digest, self.path, self.problem = digest, path, problem


class TensorStore:
    """Writes each distinct tensor dict once, at ``root/<h[:2]>/<h>.safetensors``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}{SUFFIX}"

    def put(self, tensors: dict[str, torch.Tensor]) -> tuple[str, Path]:
        """Store ``tensors``; returns (hash, path). A file already there is kept only if it verifies, so a
        damaged one is rewritten. Writing is atomic (temp file + rename): a killed process leaves no
        half-written file under a hash, at most a temporary file that :meth:`files` lists."""
        digest, blob = content_hash(tensors)
        path = self.path_for(digest)
        if self.problem(digest) is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=TEMP_SUFFIX)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(blob)
                os.replace(tmp, path)
            except BaseException as exc:
                Path(tmp).unlink(missing_ok=True)
                if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):  # say where
                    raise OSError(exc.errno, exc.strerror, str(path)) from exc
                raise
        return digest, path

    def _read(self, digest: str) -> bytes:
        """The file's bytes, verified against ``digest``."""
        path = self.path_for(digest)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            raise DamagedTensorError(digest, path, "missing") from None
        if hashlib.sha256(blob).hexdigest() != digest:
            raise DamagedTensorError(digest, path, f"damaged ({len(blob):,} bytes whose content does not match "
                                                   "its hash: truncated or altered)")
        return blob

    def problem(self, digest: str) -> str | None:
        """Why the file of ``digest`` cannot be read ("missing", "damaged ..."), or None when it verifies."""
        try:
            self._read(digest)
        except DamagedTensorError as exc:
            return exc.problem
        return None

    def get(self, digest: str, keys: Callable[[str], bool] | None = None) -> dict[str, torch.Tensor]:
        """Load the tensors stored under ``digest`` (only the names ``keys`` accepts, if given), verified."""
        tensors = load(self._read(digest))
        return {k: v for k, v in tensors.items() if keys is None or keys(k)}

    def discard(self, digest: str) -> None:
        """Delete the file of ``digest`` (a damaged one, or an orphan)."""
        self.path_for(digest).unlink(missing_ok=True)

    def files(self) -> Iterator[Path]:
        """Every tensor file and leftover temporary file under the root."""
        if self.root.exists():
            for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
                yield from sorted(p for p in folder.iterdir() if p.suffix in (SUFFIX, TEMP_SUFFIX))


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
