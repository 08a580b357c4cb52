"""Figures of the scheduler playground (pure functions of simulation outcomes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

CLASS_COLORS = {"short": "#1f77b4", "long": "#d62728"}


def latency_cdf_figure(requests_by_label: dict[str, pd.DataFrame], metric: str = "e2e_s",
                       length_class: str | None = None) -> go.Figure:
    """Empirical CDF of a latency metric, one line per configuration."""
    fig = go.Figure()
    for label, req in requests_by_label.items():
        data = req if length_class is None else req[req["length_class"] == length_class]
        values = np.sort(data[metric].dropna().to_numpy())
        if len(values) > 500:
            values = np.quantile(values, np.linspace(0, 1, 500))
        fig.add_trace(go.Scatter(x=values, y=np.linspace(0, 1, len(values)), mode="lines", name=label))
    scope = f" ({length_class} requests)" if length_class else ""
    fig.update_layout(title=f"{metric.removesuffix('_s').upper()} CDF{scope}", xaxis_title="seconds",
                      yaxis_title="fraction of requests", legend_title="configuration")
    return fig


def percentile_figure(table: pd.DataFrame) -> go.Figure:
    """P99 end-to-end latency for all / short / long requests, grouped by configuration."""
    fig = go.Figure()
    for group in ("all", "short", "long"):
        fig.add_trace(go.Bar(x=table["label"], y=table[f"{group}_e2e_p99_s"], name=f"{group} P99",
                             text=table[f"{group}_e2e_p99_s"].round(1), textposition="outside"))
    fig.update_layout(barmode="group", title="End-to-end latency P99 by request class",
                      yaxis_title="seconds")
    return fig


def instance_load_figure(load: pd.DataFrame, value: str = "batch_size") -> go.Figure:
    """Per-instance batch size (time-averaged) or KV tokens over time."""
    fig = go.Figure()
    for (inst, role), g in load.groupby(["instance", "role"]):
        fig.add_trace(go.Scatter(x=g["t_s"], y=g[value], mode="lines", name=f"{role} {inst}",
                                 line_shape="hv"))
    fig.update_layout(title=f"Per-instance {value.replace('_', ' ')} over time", xaxis_title="time (s)",
                      yaxis_title=value.replace("_", " "))
    return fig


def gantt_figure(requests: pd.DataFrame, n: int = 300, seed: int = 0) -> go.Figure:
    """Timeline of a sample of requests: thin bar = waiting + prefill, thick bar = decoding."""
    sample = requests.sample(n=min(n, len(requests)), random_state=seed).sort_values("arrival_s")
    fig = go.Figure()
    y = np.arange(len(sample))
    for cls, color in CLASS_COLORS.items():
        part = sample["length_class"].to_numpy() == cls
        if not part.any():
            continue
        s = sample[part]
        fig.add_trace(go.Bar(y=y[part], x=s["first_token_s"] - s["arrival_s"], base=s["arrival_s"],
                             orientation="h", marker_color=color, opacity=0.35, width=0.5,
                             name=f"{cls}: to first token", customdata=s["rid"],
                             hovertemplate="request %{customdata}<br>TTFT %{x:.2f} s<extra></extra>"))
        fig.add_trace(go.Bar(y=y[part], x=s["finish_s"] - s["first_token_s"], base=s["first_token_s"],
                             orientation="h", marker_color=color, width=0.9, name=f"{cls}: decoding",
                             customdata=np.stack([s["rid"], s["output_tokens"], s["decode_instance"]], axis=1),
                             hovertemplate="request %{customdata[0]}: %{customdata[1]} tokens on decode "
                                           "%{customdata[2]}<br>decode %{x:.2f} s<extra></extra>"))
    fig.update_layout(barmode="overlay", title=f"Request timeline ({len(sample)} sampled requests)",
                      xaxis_title="time (s)", yaxis_title="request (by arrival)", bargap=0.1)
    return fig


def outlets_change_figure(ours: dict[str, float], paper_change: float) -> go.Figure:
    """Short-request P99 change vs RR+FCFS: ours per configuration beside the paper's LB+SJF value."""
    labels = [f"ours: {k}" for k in ours] + ["paper (OUTLETS, reported): LB+SJF"]
    values = [100 * v for v in ours.values()] + [100 * paper_change]
    colors = ["#1f77b4"] * len(ours) + ["#7f7f7f"]
    fig = go.Figure(go.Bar(x=labels, y=values, marker_color=colors, text=[f"{v:+.1f}%" for v in values],
                           textposition="outside"))
    fig.update_layout(title="Short-request P99 latency change vs RR+FCFS", yaxis_title="change (%)")
    return fig


def noise_sweep_figure(sweep: pd.DataFrame, baseline_short_p99: float | None = None) -> go.Figure:
    """Short/all/long P99 latency as the predictor's noise (MAE) grows."""
    fig = go.Figure()
    for col, name in (("short_e2e_p99_s", "short P99"), ("all_e2e_p99_s", "all P99"),
                      ("long_e2e_p99_s", "long P99")):
        fig.add_trace(go.Scatter(x=sweep["mae"], y=sweep[col], mode="lines+markers", name=name))
    if baseline_short_p99 is not None:
        fig.add_hline(y=baseline_short_p99, line_dash="dot", annotation_text="RR+FCFS short P99")
    fig.update_layout(title="Scheduling outcome vs predictor noise", xaxis_title="prediction MAE (tokens)",
                      yaxis_title="latency (s)")
    return fig


def qps_sweep_figure(sweep: pd.DataFrame, metric: str = "all_e2e_p99_s",
                     capacity_qps: float | None = None) -> go.Figure:
    """Latency against offered QPS, one line per policy; saturated points are crosses, the dotted line the estimated
    capacity."""
    fig = go.Figure()
    for policy, rows in sweep.groupby("policy", sort=False):
        fig.add_trace(go.Scatter(x=rows["qps"], y=rows[metric], mode="lines+markers", name=policy,
                                 marker_symbol=np.where(rows["saturated"], "x", "circle"), marker_size=10))
    if capacity_qps is not None:
        fig.add_vline(x=capacity_qps, line_dash="dot", annotation_text="estimated capacity")
    fig.update_layout(title="Latency vs load (crosses: saturated)",
                      xaxis_title="offered load (QPS)", yaxis_title=f"{metric.removesuffix('_s')} (s)",
                      yaxis_type="log")
    return fig


def live_cdf_figure(real: dict[str, pd.DataFrame], sim: dict[str, pd.DataFrame], metric: str = "e2e_s",
                    simulated: str = "simulated") -> go.Figure:
    """Empirical CDF of a latency per policy: the real run (solid) beside the simulator's replay of it (dashed, named
    ``simulated``), in the policy's colour (request latencies as
    :func:`~lenscope.analysis.scheduler.metrics.request_latencies` gives)."""
    fig = go.Figure()
    palette = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
    for k, label in enumerate(real):
        for which, frames, dash in (("real", real, "solid"), (simulated, sim, "dash")):
            values = np.sort(frames[label][metric].dropna().to_numpy())
            fig.add_trace(go.Scatter(x=values, y=np.arange(1, len(values) + 1) / len(values), mode="lines",
                                     line_shape="hv", name=f"{label}: {which}",
                                     line={"color": palette[k % len(palette)], "dash": dash}))
    fig.update_layout(title=f"{metric.removesuffix('_s').upper()} CDF: real run (solid) vs simulator (dashed)",
                      xaxis_title="seconds", yaxis_title="fraction of requests", legend_title="policy")
    return fig
