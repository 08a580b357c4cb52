"""Token-level tables of a stored run, ready for display (text of tokens and top-k candidates)."""

from __future__ import annotations

import pandas as pd

from lenscope.store.store import StoredRun


def token_table(run: StoredRun, tokenizer) -> pd.DataFrame:
    """One row per position: token text, whether it was generated, its part (``template``: the chat
    template's fixed tokens before the user's content; ``prompt``; ``answer``), next-token entropy and top-5."""
    feats = run.features
    top_ids = feats.topk_ids.tolist()
    top_probs = feats.topk_probs.tolist()
    top5 = [
        ", ".join(f"{tokenizer.decode([i])!r} {p:.2f}" for i, p in zip(ids, probs))
        for ids, probs in zip(top_ids, top_probs)
    ]
    return pd.DataFrame({
        "position": range(len(feats)),
        "token": feats.tokens,
        "generated": [i >= run.prompt_len for i in range(len(feats))],
        "part": ["template" if i < run.content_start else "prompt" if i < run.prompt_len else "answer"
                 for i in range(len(feats))],
        "entropy": feats.entropy.tolist(),
        "top5_next": top5,
    })


def entropy_summary(table: pd.DataFrame) -> dict[str, float]:
    """Mean next-token entropy over the user's prompt (template excluded) and over the answer, and the largest,
    of a :func:`token_table`."""
    return {"prompt": float(table.loc[table["part"] == "prompt", "entropy"].mean()),
            "answer": float(table.loc[table["generated"], "entropy"].mean()),
            "max": float(table["entropy"].max())}
