"""GGUF models converted once into plain safetensors checkpoints.

transformers parses a GGUF file's metadata in Python on every load (about 40 s for SmolLM2-135M on 2 cores);
the converted copy (dequantized float32 weights, config, generation config and tokenizer) loads in about a
second and gives identical logits and token ids. Copies live under ``LENSCOPE_GGUF_CACHE`` (default
``$XDG_CACHE_HOME/lenscope/gguf``, else ``~/.cache/lenscope/gguf``; ``off`` disables them), one folder per
GGUF file, size, modification time and transformers version, written to a temporary folder and renamed.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
import transformers

from lenscope.models.sources import LOCAL_LOAD_OPTIONS

CACHE_ENV = "LENSCOPE_GGUF_CACHE"
# Bump when what is written changes, so that older copies are not read.
FORMAT_VERSION = 1
COMPLETE_MARK = "lenscope-converted.json"

log = logging.getLogger(__name__)


def cache_root() -> Path | None:
    """Where converted copies live, or None when ``LENSCOPE_GGUF_CACHE=off``."""
    setting = os.environ.get(CACHE_ENV, "").strip()
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lenscope" / "gguf"


def converted_dir(gguf: Path) -> Path | None:
    """The folder of ``gguf``'s converted copy (existing or not); None when copies are off."""
    root = cache_root()
    if root is None:
        return None
    stat = gguf.stat()
    ident = f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}|{FORMAT_VERSION}"
    return root / f"{gguf.stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def find_converted(gguf: Path) -> Path | None:
    """The complete converted copy of ``gguf``, if one was written."""
    folder = converted_dir(gguf)
    return folder if folder is not None and (folder / COMPLETE_MARK).is_file() else None


def load_converted(gguf: Path, dtype: torch.dtype) -> tuple[torch.nn.Module, object] | None:
    """(model, tokenizer) from ``gguf``'s converted copy, or None when there is none. A copy that does not load
    (a damaged file) is deleted, so that the caller parses the GGUF and writes it again."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = find_converted(gguf)
    if folder is None:
        return None
    try:
        return (AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **LOCAL_LOAD_OPTIONS),
                AutoTokenizer.from_pretrained(folder, **LOCAL_LOAD_OPTIONS))
    except Exception as exc:  # noqa: BLE001 - any failure: fall back to the GGUF itself
        log.warning("the converted copy of %s in %s does not load (%s); converting again", gguf, folder, exc)
        shutil.rmtree(folder, ignore_errors=True)
        return None


def save_converted(model, tokenizer, gguf: Path) -> Path | None:
    """Write the float32 ``model`` and ``tokenizer`` loaded from ``gguf`` as its converted copy. A failure (disk
    full, read-only cache) is logged and leaves nothing behind: the next load parses the GGUF again."""
    from safetensors.torch import save_model

    folder = converted_dir(gguf)
    if folder is None:
        return None
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        config = copy.deepcopy(model.config)
        if hasattr(config, "quantization_config"):  # the weights are dequantized: a plain checkpoint
            del config.quantization_config
        config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        (tmp / COMPLETE_MARK).write_text(f'{{"gguf": "{gguf.resolve()}", "format": {FORMAT_VERSION}}}\n')
        try:
            tmp.rename(folder)
        except OSError:  # another process converted the same file meanwhile: keep its copy
            if find_converted(gguf) is None:
                raise
        return folder
    except Exception as exc:  # noqa: BLE001 - a cache write (disk full: safetensors raises its own error type)
        log.warning("could not keep a converted copy of %s in %s (%s); the next load parses the GGUF again",
                    gguf, folder.parent, exc)
        return None
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
