"""Figures of per-token next-token entropy."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

PARTS = {"template": "chat template, not pooled", "prompt": "prompt", "answer": "answer"}


def _cell_label(token: str) -> str:
    return html.escape(token.replace("\n", "⏎").replace(" ", "·"))[:12]


def entropy_heatmap(table: pd.DataFrame, width: int = 16) -> go.Figure:
    """Tokens laid out like text, ``width`` per row, coloured by next-token entropy.

    The chat template's fixed tokens (system turn, user header: never pooled), the user's prompt and the
    answer each start on a fresh row, labelled by their part; hover shows the token, its position and part,
    entropy and the top-5 next-token candidates. ``table`` is a :func:`lenscope.jobs.runs.token_view.token_table`.
    """
    if width < 1:
        raise ValueError("width must be positive")
    rows: list[list[int]] = []
    for part in PARTS:
        idx = table.index[table["part"] == part].tolist()
        rows.extend(idx[i:i + width] for i in range(0, len(idx), width))
    z = np.full((len(rows), width), np.nan)
    text = np.full((len(rows), width), "", dtype=object)
    hover = np.full((len(rows), width), "", dtype=object)
    labels = []
    for r, idx in enumerate(rows):
        first = table.loc[idx[0]]
        labels.append(f"{first['part']} {int(first['position'])}")
        for c, i in enumerate(idx):
            row = table.loc[i]
            z[r, c] = row["entropy"]
            text[r, c] = _cell_label(row["token"])
            hover[r, c] = (f"<b>{html.escape(repr(row['token']))}</b> (pos {int(row['position'])}, "
                           f"{PARTS[row['part']]})<br>entropy {row['entropy']:.3f} nats"
                           f"<br>top-5 next: {html.escape(row['top5_next'])}")
    fig = go.Figure(go.Heatmap(
        z=z, text=text, texttemplate="%{text}", hovertext=hover, hoverinfo="text",
        colorscale="Viridis", colorbar={"title": "entropy (nats)"}, xgap=1, ygap=1,
    ))
    fig.update_yaxes(autorange="reversed", tickvals=list(range(len(rows))), ticktext=labels)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(title="Next-token entropy per token", height=max(300, 28 * len(rows) + 120),
                      margin={"l": 90, "r": 20, "t": 50, "b": 20})
    return fig


def entropy_profile(table: pd.DataFrame) -> go.Figure:
    """Entropy along the sequence, prompt and answer in two colours."""
    fig = go.Figure()
    for generated, name in ((False, "prompt"), (True, "answer")):
        part = table[table["generated"] == generated]
        fig.add_trace(go.Scatter(x=part["position"], y=part["entropy"], mode="lines+markers", name=name,
                                 text=part["token"], hovertemplate="%{text}<br>pos %{x}<br>H=%{y:.3f}<extra></extra>"))
    fig.update_layout(title="Entropy along the sequence", xaxis_title="position",
                      yaxis_title="entropy (nats)", height=320, margin={"t": 50, "b": 40})
    return fig
