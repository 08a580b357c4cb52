"""Who may be trained on together: conversation-level task keys, leak groups, cross-validation folds and splits.

A *task key* names the conversation a prompt came from, for every source alike: a ShareGPT record id without its
turn suffix (``79vV0aT_508`` and ``79vV0aT_2`` are chunks of conversation ``79vV0aT``; the chat and the long
scenario share it), a HumanEval task id (its plain, chain-of-thought and RL wrappers are one task), and for a
typed prompt a hash of its text. Keys that are linked by text form one *group*: when one prompt, whitespace
normalised and of at least :data:`MIN_CONTAINED_WORDS` words, sits inside another, their conversations are merged
(union-find), so a test prompt is never contained in a training prompt. Shorter prompts ("how are you") are not
linked: they sit inside thousands of others and carry no answer.

A group's *fold* (0..K-1) is a hash of its key alone, with no training seed and no database id, so two stores
and two trainings agree. Cross-validation fold ``f`` tests on the groups of fold ``f`` and trains on the others,
of which a hashed :data:`VAL_FRACTION` (by a second, independent hash) is the validation part that epochs and
early stopping are chosen on. The single *split* every page shows is fold 0 of that scheme: test = fold 0,
then val and train from the other folds.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

SPLITS = ("train", "val", "test")
FOLDS = 5  # the default K of grouped cross-validation; the single split is its fold 0
VAL_FRACTION = 0.15  # of the training folds' groups, held out for epochs and early stopping
FOLD_SALT, VAL_SALT = "lenscope-fold-1", "lenscope-val-1"
MIN_CONTAINED_WORDS = 8
_TURN = re.compile(r"(.+)_\d+")


def conversation_id(ref: str) -> str:
    """A ShareGPT record id without its turn/chunk suffix (``79vV0aT_508`` -> ``79vV0aT``)."""
    match = _TURN.fullmatch(ref)
    return match.group(1) if match else ref


def task_key(source: str, ref: str, text: str) -> str:
    """The conversation a prompt belongs to: ``sharegpt:<conversation>`` for every ShareGPT source (chat and long
    alike), ``<source>:<ref>`` for other referenced prompts (a HumanEval task id), a hash of the text otherwise."""
    if not ref:
        return "text:" + hashlib.sha256(text.encode()).hexdigest()[:32]
    if source.startswith("sharegpt"):
        return f"sharegpt:{conversation_id(ref)}"
    return f"{source}:{ref}"


def normalize(text: str) -> str:
    """Whitespace collapsed to single spaces, ends stripped: the form containment is checked in."""
    return " ".join(text.split())


@lru_cache(maxsize=8)
def _groups(pairs: tuple[tuple[str, str], ...], min_words: int) -> dict[str, str]:
    parent: dict[str, str] = {}

    def find(k: str) -> str:
        while parent.setdefault(k, k) != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    by_text: dict[str, set[str]] = {}
    for key, text in pairs:
        find(key)
        by_text.setdefault(normalize(text), set()).add(key)
    for keys in by_text.values():  # the same text under two keys
        first, *rest = sorted(keys)
        for other in rest:
            parent[find(other)] = find(first)
    texts = sorted(by_text, key=len)
    haystack = "\x00".join(texts)
    starts, pos = [], 0
    for t in texts:
        starts.append(pos)
        pos += len(t) + 1
    for i, small in enumerate(texts):
        if len(small.split()) < min_words:
            continue
        at = haystack.find(small)
        while at != -1:
            j = _index_at(starts, at)
            if j != i:
                a, b = find(next(iter(by_text[small]))), find(next(iter(by_text[texts[j]])))
                if a != b:
                    parent[max(a, b)] = min(a, b)
            at = haystack.find(small, at + 1)
    return {key: find(key) for key, _ in pairs}


def _index_at(starts: Sequence[int], offset: int) -> int:
    """Index of the text whose span in the joined haystack holds ``offset``."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def leak_groups(keys: Iterable[str], texts: Iterable[str], min_words: int = MIN_CONTAINED_WORDS) -> list[str]:
    """The group of each (task key, prompt text): the smallest key among the conversations linked to it by
    containment (one normalised prompt of at least ``min_words`` words inside another) or by an identical text."""
    pairs = tuple(zip(keys, texts))
    found = _groups(pairs, min_words)
    return [found[key] for key, _ in pairs]


def _unit(salt: str, key: str) -> float:
    digest = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def fold_of(group: str, folds: int = FOLDS) -> int:
    """The cross-validation fold (0..folds-1) of one group, from a hash of its key: stable as the dataset grows."""
    if folds < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {folds}")
    return min(int(_unit(FOLD_SALT, group) * folds), folds - 1)


def role_in_fold(group: str, fold: int, folds: int = FOLDS, val_fraction: float = VAL_FRACTION) -> str:
    """``test`` when ``group`` is in ``fold``, else ``val`` for a hashed ``val_fraction`` of the other groups,
    else ``train``."""
    if not 0 <= fold < folds:
        raise ValueError(f"fold must be in 0..{folds - 1}, got {fold}")
    if fold_of(group, folds) == fold:
        return "test"
    return "val" if _unit(VAL_SALT, group) < val_fraction else "train"


def split_of(group: str) -> str:
    """The single split of one group: its role in fold 0 of :data:`FOLDS`-fold cross-validation."""
    return role_in_fold(group, 0)


def evaluation_split(splits: Iterable[str]) -> str:
    """The split metrics are reported on: test, else val, else train (tiny datasets)."""
    present = set(splits)
    return next(s for s in ("test", "val", "train") if s in present)
