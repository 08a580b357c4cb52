"""Figures of the Results page: MAE bars per scenario, predicted-vs-true heatmap, length CDFs, and export."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lenscope.analysis.core.metrics import ci_text
from lenscope.analysis.core.verdicts import paired_verdict
from lenscope.analysis.results.leaderboard import ALL, scenario_order


def mae_bars(scores: pd.DataFrame, metric: str = "mae") -> go.Figure:
    """Grouped bars: one group per scenario (``all`` last), one bar per predictor."""
    fig = go.Figure()
    order = scenario_order(scores["scenario"]) if not scores.empty else [ALL]
    for predictor, group in scores.groupby("predictor", sort=False):
        g = group.set_index("scenario").reindex(order)
        fig.add_bar(x=order, y=g[metric], name=predictor, customdata=g["n"],
                    hovertemplate=f"{predictor}<br>%{{x}}: %{{y:.3g}} (n=%{{customdata}})<extra></extra>")
    label = "MAE (tokens)" if metric == "mae" else "Kendall tau"
    fig.update_layout(barmode="group", xaxis_title="scenario", yaxis_title=label, height=460,
                      title=f"{label} by scenario", legend={"orientation": "h", "y": -0.2})
    return fig


def pred_true_heatmap(counts: np.ndarray, edges: np.ndarray, title: str) -> go.Figure:
    """2-D histogram of (predicted, true) lengths with the diagonal y = x."""
    centers = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure(go.Heatmap(x=centers, y=centers, z=counts, colorscale="Viridis",
                               colorbar={"title": "runs"},
                               hovertemplate="predicted %{x:.0f}<br>true %{y:.0f}<br>%{z} runs<extra></extra>"))
    fig.add_scatter(x=[edges[0], edges[-1]], y=[edges[0], edges[-1]], mode="lines", name="y = x",
                    line={"color": "white", "dash": "dash"})
    fig.update_layout(title=title, xaxis_title="predicted length (tokens)", yaxis_title="true length (tokens)",
                      height=480, showlegend=False)
    return fig


def length_cdf_figure(cdfs: pd.DataFrame) -> go.Figure:
    """Empirical CDFs of the true lengths and of each predictor's predictions."""
    fig = go.Figure()
    for series, group in cdfs.groupby("series", sort=False):
        truth = series == "true length"
        fig.add_scatter(x=group["length"], y=group["cdf"], mode="lines", name=series, line_shape="hv",
                        line={"color": "black", "width": 3} if truth else {"width": 1.5})
    fig.update_layout(title="Length CDFs: true vs predicted", xaxis_title="length (tokens)",
                      yaxis_title="fraction of runs", height=460, legend={"orientation": "h", "y": -0.2})
    return fig


def png_export_available() -> bool:
    """Whether plotly can render PNGs here (it needs the optional ``kaleido`` package)."""
    return importlib.util.find_spec("kaleido") is not None


def export_format() -> tuple[str, str]:
    """(file extension, MIME type) figures are exported as: PNG with kaleido, else standalone HTML."""
    return ("png", "image/png") if png_export_available() else ("html", "text/html")


def figure_bytes(fig: go.Figure) -> bytes:
    """The figure in :func:`export_format` (HTML embeds plotly.js, so the file opens offline)."""
    if png_export_available():
        return fig.to_image(format="png", scale=2)
    return fig.to_html(include_plotlyjs=True, full_html=True).encode("utf-8")


def comparison_table(scores: pd.DataFrame, paired: pd.DataFrame) -> pd.DataFrame:
    """One row per predictor (all scenarios): MAE [95% CI], prompts, and its paired difference to the
    reference [95% CI] with a plain verdict."""
    overall = scores[scores["scenario"] == "all"].set_index("predictor")
    out = []
    for row in overall.itertuples():
        item = {"predictor": row.Index, "runs": int(row.n), "prompts": int(row.prompts),
                "MAE [95% CI]": ci_text(row.mae, row.mae_lo, row.mae_hi)}
        match = paired[paired["predictor"] == row.Index]
        if not match.empty:
            d = match.iloc[0]
            item["vs constant [95% CI]"] = ci_text(d.difference, d.diff_lo, d.diff_hi, signed=True)
            item["verdict"] = paired_verdict(d.diff_lo, d.diff_hi, int(row.prompts), (
                "better than constant", "worse than constant", "not distinguishable from constant"))
        out.append(item)
    return pd.DataFrame(out)
