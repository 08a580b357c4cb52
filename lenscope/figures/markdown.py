"""Markdown tables: the one way a table becomes markdown (the docs' rendered blocks, the claims on the command
line, the benchmark records)."""

from __future__ import annotations

import pandas as pd


def cell(value: object) -> str:
    """A table cell: empty for None/NaN, pipes escaped, line breaks as spaces, numbers as pandas shows them."""
    if value is None or (not isinstance(value, str) and pd.api.types.is_scalar(value) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        value = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    elif isinstance(value, int) and not isinstance(value, bool):
        value = f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(frame: pd.DataFrame) -> str:
    """``frame`` as a GitHub-flavoured markdown table (index dropped; name it as a column first to keep it)."""
    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def source_note(text: str) -> str:
    """The line under a table saying where its numbers come from (rendered: do not edit by hand)."""
    return f"\n*{text}*"
