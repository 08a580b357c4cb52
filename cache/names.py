"""Dataset names, checked once wherever a name enters (CLI flags, the app's fields, the Python API, the store).

A dataset name also names files: trained predictors' artifacts are kept under the data dir by a name built from
it (:func:`lenscope.store.settings.artifact_path`), so only a short, plain name is a dataset name.
"""

from __future__ import annotations

import re

MAX_DATASET_NAME = 64
#: Letters, digits, '.', '_' and '-', starting with a letter or digit, at most :data:`MAX_DATASET_NAME` characters.
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DATASET_NAME_RULE = (f"1 to {MAX_DATASET_NAME} letters, digits, '.', '_' or '-', starting with a letter or digit "
                     "(e.g. study, starter, mine-2)")
_SHOWN = 40  # characters of a refused name repeated in its message


def shown(text: str) -> str:
    """``text`` quoted for a message, cut to its first characters (a 10 KB name is not echoed whole)."""
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}... ({len(text):,} characters)"


def dataset_problem(name: str) -> str | None:
    """Why ``name`` is not a dataset name (one line), or None when it is one."""
    if len(name) > MAX_DATASET_NAME or not DATASET_NAME.fullmatch(name):
        return f"dataset name {shown(name)} is not allowed: a dataset name is {DATASET_NAME_RULE}"
    return None


def dataset_name(name: object) -> str:
    """``name`` when it is a valid dataset name; TypeError for a non-string, ValueError saying the rule otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"a dataset name is a str, not {type(name).__name__}")
    problem = dataset_problem(name)
    if problem:
        raise ValueError(problem)
    return name
