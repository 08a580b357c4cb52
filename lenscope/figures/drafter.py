"""Figures of the Drafter-vs-target page: remaining-length curves, MAE by step, the drafters' and probes'
length metrics, and UMAP scatter plots of representations (live speculative decoding: :mod:`.speculative`)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lenscope.analysis.core.metrics import ci_text, mae_by_step
from lenscope.analysis.core.verdicts import paired_verdict


def remaining_curves_figure(curves: pd.DataFrame, title: str = "Remaining length of this generation",
                            censored: bool = False) -> go.Figure:
    """True remaining length and every predictor column of ``curves`` (step, true, <predictor>...); ``censored``:
    the answer hit its token cap, so ``true`` counts the tokens left to the cap, a lower bound."""
    fig = go.Figure()
    truth = "tokens left to the cap (censored: a lower bound)" if censored else "true remaining"
    fig.add_scatter(x=curves["step"], y=curves["true"], name=truth, line={"color": "black", "dash": "dash"})
    for column in curves.columns.drop(["step", "true"]):
        fig.add_scatter(x=curves["step"], y=curves[column], name=column, mode="lines")
    fig.update_layout(title=title, xaxis_title="generated tokens (step)", yaxis_title="remaining tokens")
    return fig


def mae_by_step_figure(predictions: Mapping[str, pd.DataFrame], max_step: int | None = None) -> go.Figure:
    """Dataset-wide MAE per decoding step, one line per named predictions frame."""
    fig = go.Figure()
    for name, frame in predictions.items():
        curve = mae_by_step(frame, max_step)
        fig.add_scatter(x=curve["step"], y=curve["mae"], name=name, mode="lines",
                        customdata=curve["n"], hovertemplate="step %{x}: MAE %{y:.1f} (n=%{customdata})")
    fig.update_layout(title="MAE of remaining-length predictions by decoding step",
                      xaxis_title="generated tokens (step)", yaxis_title="MAE (tokens)")
    return fig


def umap_figure(payload: Mapping[str, list]) -> go.Figure:
    """Side-by-side 2-D UMAPs of drafter and target representations, coloured by remaining length."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("drafter representation",
                                                        f"target layer {payload.get('layer', '?')}"))
    for col, key in enumerate(("drafter", "target"), start=1):
        xy = pd.DataFrame(payload[key], columns=["x", "y"])
        fig.add_scatter(x=xy["x"], y=xy["y"], mode="markers", row=1, col=col, showlegend=False,
                        marker={"size": 4, "color": payload["remaining"], "colorscale": "Viridis",
                                "showscale": col == 2, "colorbar": {"title": "remaining"}},
                        customdata=payload["step"], hovertemplate="step %{customdata}<br>remaining %{marker.color}")
    fig.update_layout(title="UMAP of representations coloured by remaining length")
    return fig


def ablation_table(predictors: pd.DataFrame) -> pd.DataFrame:
    """One row per registered drafter/probe with its headline metrics (from ``predictors_frame``)."""
    rows = []
    for p in predictors.itertuples():
        m, c = p.metrics or {}, p.config or {}
        rows.append({"name": p.name, "kind": p.kind, "variant": c.get("variant", c.get("mode")),
                     "static MAE [95% CI]": _interval(m, "static_mae"),
                     "static vs constant [95% CI]": _interval(m, "static_vs_constant", signed=True),
                     "dynamic MAE, steps 0-32 [95% CI]": _interval(m, "dynamic_mae"),
                     "dynamic vs constant [95% CI]": _interval(m, "dynamic_vs_constant", signed=True),
                     "eval split": m.get("eval_split"),
                     "runs": m.get("n_runs")})
    return pd.DataFrame(rows)


def _interval(metrics: dict, key: str, signed: bool = False) -> str:
    """``value [lo, hi]`` of a metric with its ``_lo``/``_hi`` bounds (empty when absent)."""
    if metrics.get(key) is None or metrics.get(f"{key}_lo") is None:
        return ""
    return ci_text(metrics[key], metrics[f"{key}_lo"], metrics[f"{key}_hi"], signed)


def paired_comparison_table(comparisons: list[dict]) -> pd.DataFrame:
    """Paired MAE differences between two predictors on the same runs and steps, with a plain verdict."""
    return pd.DataFrame([{"comparison": f"{c['first']} - {c['second']}", "steps": c["steps"],
                          "difference [95% CI]": ci_text(c["difference"], c["lo"], c["hi"], signed=True),
                          "prompts": c["prompts"], "runs": c["runs"],
                          "verdict": paired_verdict(c["lo"], c["hi"], c["prompts"])}
                         for c in comparisons])


def drafter_ablation_tables(payload: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(each drafter and probe's MAE [95% CI] over the test split's steps 0-32, the paired differences with the
    share of the gain each measures and its verdict)."""
    maes = pd.DataFrame([{"predictor": label, "MAE, steps 0-32 [95% CI]": ci_text(m["value"], m["lo"], m["hi"]),
                          "prompts": m["n"], "runs": m["runs"]} for label, m in payload["predictors"].items()])
    pairs = pd.DataFrame([{"first - second": f"{p['first']} - {p['second']}", "measures": p["share"] or "",
                           "difference [95% CI]": ci_text(p["difference"], p["lo"], p["hi"], signed=True),
                           "prompts": p["prompts"], "verdict": p["verdict"]} for p in payload["pairs"]])
    return maes, pairs
