"""What a model spec typed in the browser may load: the embedded models, hub ids, and local paths under the
allowed roots (``LENSCOPE_ALLOWED_MODEL_ROOTS``). The CLI keeps full access: only the app applies this."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from models.sources import ModelSource

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
REFUSED = ("{spec!r} is not a model the app may load: it loads the embedded models, hub ids (owner/name) and "
           "local paths under LENSCOPE_ALLOWED_MODEL_ROOTS (by default the working directory, the data "
           "directory and the Hugging Face cache); the CLI's --model loads any path")


def browser_source(spec: str, roots: Sequence[Path]) -> str | ModelSource:
    """What to load for ``spec``: the spec itself for an embedded model or a path that resolves (symlinks
    followed) under one of ``roots`` (resolved), else the hub source of an ``owner/name`` id, even where a local
    path of that name exists; anything else is refused with a ValueError whose text does not depend on whether
    the path exists."""
    spec = spec.strip()
    if not spec or spec.startswith("embedded:"):
        return spec
    try:
        path = Path(spec).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # unknown ~user, NUL bytes, a symlink loop
        path = None
    if path is not None and any(path.is_relative_to(root) for root in roots):
        return spec
    if HUB_ID.fullmatch(spec) and ".." not in spec:
        return ModelSource(spec, spec, local=False)
    raise ValueError(REFUSED.format(spec=spec))
