"""What a model spec typed in the browser may load: the embedded models, hub ids, and local paths under the
allowed roots (``LENSCOPE_ALLOWED_MODEL_ROOTS``). The CLI keeps full access: only the app applies this."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from lenscope.models.sources import ModelSource, resolve_source

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
REFUSED = ("{spec!r} is not a model the app may load: it loads the embedded models, hub ids (owner/name) and "
           "local paths under LENSCOPE_ALLOWED_MODEL_ROOTS (by default the working directory, the data "
           "directory and the Hugging Face cache); the CLI's --model loads any path")


def browser_source(spec: str, roots: Sequence[Path]) -> str | ModelSource:
    """What to load for ``spec``: the spec itself for an embedded model; for a local path (one that exists,
    even as a dangling symlink, or an absolute or ``~`` path) that resolves, symlinks followed, under one of
    ``roots`` (resolved), the source of that resolved path, resolved once here and loaded as it is; the hub
    source of an ``owner/name`` id of which no local path exists; anything else is refused with a ValueError
    whose text does not depend on whether the path exists. A name that exists locally is never a hub id:
    transformers would load the local folder, wherever its symlink leads."""
    spec = spec.strip()
    if not spec or spec.startswith("embedded:"):
        return spec
    try:
        given = Path(spec).expanduser()
        exists = os.path.lexists(given)
        path = given.resolve()
    except (OSError, RuntimeError, ValueError):  # unknown ~user, NUL bytes, a symlink loop
        exists, path = False, None
    if not exists and HUB_ID.fullmatch(spec) and ".." not in spec:
        return ModelSource(spec, spec, local=False)
    if path is not None and any(path.is_relative_to(root) for root in roots):
        return replace(resolve_source(str(path)), spec=spec)
    raise ValueError(REFUSED.format(spec=spec))
