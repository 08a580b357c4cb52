"""Serving metrics of a simulation: latency percentiles by request class, throughput, padding; intervals over
seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from lenscope.analysis.core.metrics import Estimate
from lenscope.analysis.scheduler.engine import SimResult

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft_s", "tpot_s", "e2e_s")


def request_latencies(result: SimResult, short_quantile: float = 0.5) -> pd.DataFrame:
    """Per request: TTFT, TPOT (time per output token after the first), end-to-end latency, and
    the class ``short``/``long`` split at ``short_quantile`` of the true output length."""
    r = result.requests
    if not 0 < short_quantile < 1:
        raise ValueError("short_quantile must be in (0, 1)")
    out = r[["rid", "arrival_s", "prompt_tokens", "output_tokens", "predicted_tokens", "decode_instance",
             "preemptions", "cached_tokens", "first_token_s", "finish_s"]].copy()
    out["ttft_s"] = r["first_token_s"] - r["arrival_s"]
    out["e2e_s"] = r["finish_s"] - r["arrival_s"]
    steps = (r["output_tokens"] - 1).where(r["output_tokens"] > 1)
    out["tpot_s"] = (r["finish_s"] - r["first_token_s"]) / steps
    cut = float(np.quantile(r["output_tokens"], short_quantile))
    out["length_class"] = np.where(r["output_tokens"] <= cut, "short", "long")
    return out


def padding_ratio(batches: pd.DataFrame) -> float:
    """Wasted decode slots of static batching: 1 - sum L_i / sum_b (B_b * max L in b)."""
    if batches.empty:
        return 0.0
    return float(1.0 - batches["sum_len"].sum() / (batches["size"] * batches["max_len"]).sum())


def summarize(result: SimResult, short_quantile: float = 0.5) -> dict:
    """Headline numbers: latency percentiles for all/short/long, throughput, JCT, padding, preemptions, and the
    share of prompt tokens found in prefix caches."""
    lat = request_latencies(result, short_quantile)
    summary: dict = {"label": result.config.label(), "requests": len(lat)}
    for group, frame in (("all", lat), ("short", lat[lat.length_class == "short"]),
                         ("long", lat[lat.length_class == "long"])):
        for metric in LATENCIES:
            values = frame[metric].dropna().to_numpy()
            for p in PERCENTILES:
                summary[f"{group}_{metric.removesuffix('_s')}_p{p}_s"] = \
                    float(np.percentile(values, p)) if len(values) else float("nan")
    span = float(lat["finish_s"].max() - lat["arrival_s"].min())
    summary.update({
        "throughput_tok_s": float(lat["output_tokens"].sum() / span) if span > 0 else float("nan"),
        "mean_jct_s": float(lat["e2e_s"].mean()),
        "makespan_s": span,
        "padding_ratio": padding_ratio(result.batches),
        "preemptions": int(lat["preemptions"].sum()),
        "prefix_hit_rate": float(lat["cached_tokens"].sum() / lat["prompt_tokens"].sum()),
        "short_cut_tokens": float(np.quantile(lat["output_tokens"], short_quantile)),
        "wall_s": result.wall_s,
    })
    return summary


def backlog_growth(requests: pd.DataFrame) -> float:
    """Mean number of requests in the system found by the last quarter of arrivals over that found by the second
    quarter (the first is left out as warm-up): about 1 while the cluster keeps up, well above 1 when the backlog
    grows all run long (saturation), whatever order the queues serve in. ``requests`` has columns arrival_s and
    finish_s (a uniform sample of a run's requests gives the same ratio)."""
    arrival = np.sort(requests["arrival_s"].to_numpy(float))
    finish = np.sort(requests["finish_s"].to_numpy(float))
    quarter = len(arrival) // 4
    if quarter == 0:
        raise ValueError("need at least 4 requests to measure backlog growth")
    found = np.arange(len(arrival)) - np.searchsorted(finish, arrival, side="right")  # others in system at arrival
    second, last = found[quarter:2 * quarter].mean(), found[3 * quarter:].mean()
    return float(last / second) if second > 0 else (float("inf") if last > 0 else 1.0)


def served_fraction(arrival_window_s: float, makespan_s: float) -> float:
    """Served over offered request rate of a run: its arrival window (first to last arrival) over its makespan (first
    arrival to last finish); near 1 while the cluster keeps up, the capacity over the offered load beyond it."""
    return arrival_window_s / makespan_s if makespan_s > 0 else 1.0


def relative_change(before: float, after: float) -> float:
    """(after - before) / before, e.g. -0.348 for a 34.8 % reduction."""
    return (after - before) / before if before else float("nan")


def instance_load(result: SimResult, bins: int = 200) -> pd.DataFrame:
    """Time-averaged batch size and peak KV tokens per instance on a regular time grid."""
    seg = result.segments
    if seg.empty:
        return pd.DataFrame(columns=["instance", "role", "t_s", "batch_size", "kv_tokens"])
    edges = np.linspace(seg["start_s"].min(), seg["end_s"].max(), bins + 1)
    rows = []
    for (inst, role), g in seg.groupby(["instance", "role"]):
        start, end = g["start_s"].to_numpy(), g["end_s"].to_numpy()
        lo, hi = edges[:-1], edges[1:]
        overlap = np.clip(np.minimum(end[:, None], hi) - np.maximum(start[:, None], lo), 0, None) \
            if len(g) * bins <= 5_000_000 else None
        if overlap is None:  # very long runs: attribute each segment to the bin of its midpoint
            mid = np.digitize((start + end) / 2, edges[1:-1])
            busy = np.bincount(mid, weights=g["batch_size"] * (end - start), minlength=bins)
            kv = pd.Series(g["kv_tokens"].to_numpy()).groupby(mid).max().reindex(range(bins), fill_value=0)
        else:
            busy = overlap.T @ g["batch_size"].to_numpy(float)
            kv = pd.Series(np.where(overlap.T > 0, g["kv_tokens"].to_numpy(), 0).max(axis=1))
        rows.append(pd.DataFrame({"instance": inst, "role": role, "t_s": (lo + hi) / 2,
                                  "batch_size": busy / (hi - lo), "kv_tokens": kv.to_numpy()}))
    return pd.concat(rows, ignore_index=True)


def t_interval(values, level: float = 0.95) -> Estimate:
    """Mean of ``values`` (one per seed) with its Student-t interval, mean +- t_{(1+level)/2, n-1} * sd / sqrt(n)
    (sd with n - 1 degrees of freedom); NaN bounds under two values, NaN throughout for none."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        mean = float(v[0]) if v.size else float("nan")
        return Estimate(mean, float("nan"), float("nan"), int(v.size))
    mean, half = float(v.mean()), float(stats.t.ppf((1 + level) / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return Estimate(mean, mean - half, mean + half, int(v.size))
