"""Figures of the EGTP pages: token attribution, remaining length, pooling ablation."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lenscope.analysis.core.metrics import ci_text
from lenscope.analysis.core.verdicts import paired_verdict, too_few_prompts


def token_bars(tokens: Sequence[str], entropy: Sequence[float], importance: Sequence[float],
               title: str = "") -> go.Figure:
    """Per-token bars: entropy (top) and gradient importance (bottom) of one prompt."""
    labels = [f"{i}:{t!r}"[:24] for i, t in enumerate(tokens)]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("token entropy H_t (nats)", "importance I_t = ||dL_MSE/dh_t||"))
    fig.add_bar(x=labels, y=list(entropy), name="entropy", marker_color="#1f77b4", row=1, col=1)
    fig.add_bar(x=labels, y=list(importance), name="importance", marker_color="#d62728", row=2, col=1)
    fig.update_layout(title=title, showlegend=False, height=520, margin={"t": 70})
    return fig


def entropy_importance_scatter(entropy: Sequence[float], importance: Sequence[float], summary: dict,
                               paper_r: float) -> go.Figure:
    """Token entropy vs importance over the test set, with our Pearson r (CI) and the paper's r."""
    lo, hi = summary["pearson_ci"]
    fig = go.Figure(go.Scattergl(x=list(entropy), y=list(importance), mode="markers",
                                 marker={"size": 4, "opacity": 0.4}, name="prompt tokens"))
    fig.update_layout(
        title=(f"{summary['head']} head, {summary['path']} path: Pearson r = {summary['pearson']:.3f} "
               f"[{lo:.3f}, {hi:.3f}], Spearman {summary['spearman']:.3f}, {summary['n_tokens']} tokens / "
               f"{summary['n_runs']} runs (paper: r = {paper_r})"),
        xaxis_title="token entropy H_t (nats)", yaxis_title="importance I_t", height=480)
    return fig


def remaining_length_figure(trajectory: pd.DataFrame) -> go.Figure:
    """Predicted vs true remaining length after each generated token of one run."""
    fig = go.Figure()
    fig.add_scatter(x=trajectory["step"], y=trajectory["true"], name="true remaining", line={"color": "black"})
    fig.add_scatter(x=trajectory["step"], y=trajectory["predicted"], name="PLP prediction",
                    line={"color": "#d62728"})
    fig.update_layout(xaxis_title="generated tokens t", yaxis_title="remaining tokens", height=420,
                      title="Remaining length: PLP prediction vs truth")
    return fig


def mae_by_step_figure(curve: pd.DataFrame, paper: dict[str, tuple[float, float]], max_step: int = 32) -> go.Figure:
    """Our test MAE by observed steps, with the paper's MAE at 0 and ``max_step`` steps as reference."""
    fig = go.Figure()
    fig.add_scatter(x=curve["step"], y=curve["mae"], mode="lines+markers", name="ours (test split)",
                    customdata=curve["n"], hovertemplate="step %{x}: MAE %{y:.1f} (n=%{customdata})")
    for name, (start, end) in paper.items():
        fig.add_scatter(x=[0, max_step], y=[start, end], mode="markers+lines", line={"dash": "dot"},
                        name=f"paper {name} (reference, other models/data)")
    fig.update_layout(xaxis_title="observed decoding steps", yaxis_title="MAE of remaining length (tokens)",
                      height=420, title="PLP: MAE vs observed steps")
    return fig


def pooling_ablation_figure(ours: pd.DataFrame, paper: pd.DataFrame) -> go.Figure:
    """Grouped bars of test MAE per pooling and scenario: ours (left) and the paper's (right, reference)."""
    order = ["egtp", "max", "last", "mean"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("ours: test MAE (tokens)",
                                                        "paper (ForeLen, Qwen2.5-7B) — reference only"))
    for scenario, group in ours.groupby("scenario"):
        g = group.set_index("pooling").reindex([p for p in order if p in set(group["pooling"])])
        fig.add_bar(x=g.index, y=g["mae"], name=f"ours · {scenario}", row=1, col=1)
    for col in [c for c in paper.columns if c != "pooling"]:
        fig.add_bar(x=paper["pooling"], y=paper[col], name=f"paper · {col}", row=1, col=2)
    fig.update_layout(barmode="group", height=450, yaxis_title="MAE (tokens)")
    return fig


BY_CONSTRUCTION = "true by construction (it pools by entropy): not evidence; see the evidence test"


def attribution_table(summaries: list[dict], paper_pearson: float) -> pd.DataFrame:
    """One row per head: gradient path, Pearson r with its 95% CI, Spearman, sample sizes (too few prompts to
    judge said as such; the EGTP head on its pooling path flagged true by construction); then the paper."""
    rows = [{"head": s["head"], "gradient path": s["path"], "Pearson r": round(s["pearson"], 3),
             "95% CI": f"[{s['pearson_ci'][0]:.3f}, {s['pearson_ci'][1]:.3f}]",
             "Spearman": round(s["spearman"], 3), "tokens": s["n_tokens"], "runs": s["n_runs"],
             "note": too_few_prompts(s["n_runs"]) or (BY_CONSTRUCTION if (s["head"], s["path"]) == ("egtp", "pooling")
                                                      else "")} for s in summaries]
    return pd.DataFrame(rows + [{"head": "paper (EGTP)", "Pearson r": paper_pearson}])


def pooled_scatter_points(runs: list[dict], head: str) -> tuple[list[float], list[float]]:
    """(entropy, importance) of every prompt token of every run, for the scatter of one head."""
    return ([h for r in runs for h in r["entropy"]], [i for r in runs for i in r[f"importance_{head}"]])


def ablation_pivot(rows: list[dict]) -> pd.DataFrame:
    """Test MAE [95% CI over prompts] by pooling (rows) and scenario (columns) from an ablation's rows."""
    frame = pd.DataFrame(rows)
    if "mae_lo" in frame:
        frame["mae"] = [ci_text(r.mae, r.mae_lo, r.mae_hi) for r in frame.itertuples()]
    return frame.pivot(index="pooling", columns="scenario", values="mae")


def paired_table(paired: list[dict]) -> pd.DataFrame:
    """Paired differences (first minus second, test MAE) with their 95% CI and a plain verdict."""
    return pd.DataFrame([{"comparison": p["comparison"], "difference [95% CI]": ci_text(
        p["difference"], p["lo"], p["hi"], signed=True), "prompts": p["prompts"],
        "verdict": paired_verdict(p["lo"], p["hi"], p["prompts"])}
        for p in paired])


def head_variant_table(variants: list[dict]) -> pd.DataFrame:
    """Head options on EGTP pooling: test MAE [CI] and the paired difference to the default head [CI]."""
    return pd.DataFrame([{"head": v["variant"], "test MAE [95% CI]": ci_text(v["mae"], v["mae_lo"], v["mae_hi"]),
                          "vs default [95% CI]": ci_text(v["vs_default"], v["vs_lo"], v["vs_hi"], signed=True)
                          if "vs_default" in v else "", "prompts": v["prompts"]} for v in variants])
