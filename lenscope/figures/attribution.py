"""Views of the attribution evidence (:mod:`lenscope.jobs.egtp.attribution`): the measure x control table,
the dataset scatter of one measure, and one prompt's per-token bars."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lenscope.analysis.core.metrics import ci_text
from lenscope.analysis.egtp.controls import normalise_within_run

MEASURE_LABELS = {"gradient": "gradient norm ||dL/dh_t||", "grad_x_act": "gradient x activation |<g_t, h_t>|",
                  "integrated_gradients": "Integrated Gradients |sum_d IG_t,d|",
                  "attention": "learned attention weight a_t"}
BY_CONSTRUCTION = "positive control: pools by entropy, so true by construction; not part of the test"


def _ci(value, lo, hi) -> str:
    return "n/a" if value is None or not np.isfinite(value) else ci_text(value, lo, hi, digits=3)


def _p(value) -> str:
    return "" if value is None or not np.isfinite(value) else f"{value:.2g}"


def evidence_display(rows: list[dict], paper_r: float) -> pd.DataFrame:
    """Every head x measure x control (the raw r, like for like with the paper's, first) with r [95% CI], its
    permutation p-value, Spearman [95% CI] and token/run counts; the heads of the test first, the positive
    control (by construction) last and labelled, then the paper's r."""
    table = pd.DataFrame(rows)
    table = table.sort_values("by_construction", kind="stable")
    shown = pd.DataFrame({
        "head": table["head"], "layer": table["layer"], "path": table["path"], "measure": table["measure"],
        "control": table["control"],
        "Pearson r [95% CI]": [_ci(r.pearson, r.pearson_lo, r.pearson_hi) for r in table.itertuples()],
        "permutation p": [_p(r.p_value) for r in table.itertuples()],
        "Spearman [95% CI]": [_ci(r.spearman, r.spearman_lo, r.spearman_hi) for r in table.itertuples()],
        "tokens": table["n_tokens"], "runs": table["n_runs"],
        "note": [BY_CONSTRUCTION if r.by_construction else
                 "null mean [central 95%]" if r.control == "permutation null" else "" for r in table.itertuples()],
    })
    paper = {"head": "paper (EGTP, Qwen2.5-7B, ForeLen)", "measure": "gradient", "control": "raw",
             "Pearson r [95% CI]": f"{paper_r:.3f}", "note": "reference only: other model and data"}
    out = pd.concat([shown, pd.DataFrame([paper])], ignore_index=True)
    counts = ["layer", "tokens", "runs"]
    out[counts] = out[counts].astype("Int64")
    text = [c for c in out.columns if c not in counts]
    out[text] = out[text].fillna("")
    return out


def head_summary_display(heads: list[dict]) -> pd.DataFrame:
    """Per head: test MAE [95% CI], its paired difference from mean pooling's, and the normalised entropy of its
    pooling weights (1 = uniform, as mean pooling), with the number of test runs."""
    def est(e: dict | None, signed: bool = False, digits: int = 1) -> str:
        return "n/a" if not e or e.get("value") is None else ci_text(e["value"], e["lo"], e["hi"], signed, digits)

    return pd.DataFrame({
        "head": [h["head"] for h in heads],
        "test MAE [95% CI]": [est(h["mae"]) for h in heads],
        "minus mean pooling's [95% CI]": [est(h["vs_reference"], signed=True) for h in heads],
        "weight entropy / log T [95% CI]": [est(h["weight_entropy"], digits=3) for h in heads],
        "test runs": [h["n_runs"] for h in heads]})


def _array(values: list[float | None]) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in values], dtype=float)


def evidence_scatter(records: list[dict], head: str, measure: str, row: dict, null: dict | None,
                     paper_r: float) -> go.Figure:
    """Token entropy vs run-normalised importance of ``measure`` for ``head`` over every test run's pooled
    tokens, titled with the run-normalised r [CI] (``row``), the permutation null's interval and the paper's r."""
    x = np.concatenate([np.array(r["entropy"], dtype=float) for r in records])
    # exactly the test's normalisation: a run whose importance is flat drops out of the scatter as of the r
    y = np.concatenate([normalise_within_run(_array(r["importance"][head][measure])) for r in records])
    ok = np.isfinite(x) & np.isfinite(y)
    fig = go.Figure(go.Scattergl(x=x[ok], y=y[ok], mode="markers", marker={"size": 4, "opacity": 0.35},
                                 name="pooled prompt tokens"))
    null_text = f", null [{null['pearson_lo']:.3f}, {null['pearson_hi']:.3f}]" if null else ""
    fig.update_layout(
        title=(f"{head}, layer {row['layer']}, {row['path']}: r = "
               f"{_ci(row['pearson'], row['pearson_lo'], row['pearson_hi'])}{null_text}; {row['n_tokens']} tokens / "
               f"{row['n_runs']} runs (paper r = {paper_r})"),
        xaxis_title="token entropy H_t (nats)", yaxis_title=f"{MEASURE_LABELS.get(measure, measure)} ÷ run mean",
        height=480, title_font_size=13)
    return fig


def evidence_token_bars(record: dict, head: str) -> go.Figure:
    """One test prompt's pooled tokens: entropy on top, then each importance measure of ``head`` (÷ run mean;
    the learned attention weight as is)."""
    measures = list(record["importance"][head])
    labels = [f"{i}:{t!r}"[:24] for i, t in enumerate(record["tokens"])]
    titles = ["token entropy H_t (nats)"] + [
        MEASURE_LABELS.get(m, m) + ("" if m == "attention" else " ÷ run mean") for m in measures]
    fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=0.04, subplot_titles=titles)
    fig.add_bar(x=labels, y=record["entropy"], marker_color="#1f77b4", row=1, col=1)
    for i, measure in enumerate(measures, start=2):
        values = _array(record["importance"][head][measure])
        y = values if measure == "attention" else values / np.nanmean(values)  # a flat run shows as all 1
        fig.add_bar(x=labels, y=list(y), marker_color="#d62728" if measure != "attention" else "#2ca02c",
                    row=i, col=1)
    fig.update_layout(title=f"run {record['run_id']} ({record['output_length']:.0f} answer tokens), {head}",
                      showlegend=False, height=170 * len(titles) + 80, margin={"t": 70})
    return fig
