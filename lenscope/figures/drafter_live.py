"""Figures and tables of live speculative decoding: acceptance per draft position with CIs, tau and speedup per
drafter, the paired OUTLETS - SD-only difference (the paper's "no acceptance loss"), and a live answer coloured by
who wrote each token."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from lenscope.analysis.core.metrics import estimate_text
from lenscope.analysis.core.verdicts import paired_verdict

NO_LOSS = ("OUTLETS accepts less: the paper's no-loss claim is not reproduced",
           "OUTLETS accepts more", "no difference detected: consistent with the paper's no-loss claim")
COLOURS = {"accepted": "#2e7d32", "correction": "#e65100", "target": "#546e7a"}


def acceptance_ci_figure(drafters: Mapping[str, Mapping]) -> go.Figure:
    """Acceptance rate of each draft position (given the earlier ones were accepted), one bar group per drafter,
    with 95% bootstrap CIs over prompts."""
    fig = go.Figure()
    for name, summary in drafters.items():
        rates = summary["acceptance"]
        values = [r["value"] for r in rates]
        fig.add_bar(x=[f"position {i + 1}" for i in range(len(rates))], y=values, name=name,
                    error_y={"type": "data", "symmetric": False,
                             "array": [(r["hi"] - r["value"]) if r["hi"] is not None else 0 for r in rates],
                             "arrayminus": [(r["value"] - r["lo"]) if r["lo"] is not None else 0 for r in rates]},
                    customdata=summary["evaluated"], hovertemplate="%{y:.2f} (%{customdata} drafts evaluated)")
    fig.update_layout(title="Live acceptance per draft position (95% CI over prompts)", barmode="group",
                      yaxis_title="acceptance rate", yaxis_range=[0, 1])
    return fig


def speculative_table(payload: Mapping) -> pd.DataFrame:
    """Per drafter: tau, tokens/s, speedup over plain decoding on this machine, and how many answers were
    identical to plain decoding (at temperature 0 all must be: the decoding is lossless)."""
    plain = payload["plain_tokens_per_s"]
    rows = [{"decoding": "plain (target only)", "tau: tokens per target pass [95% CI]": "1",
             "tokens/s [95% CI]": estimate_text(plain, digits=1), "speedup vs plain [95% CI]": "1",
             "answers identical to plain": "", "prompts": payload["prompts"]}]
    for name, s in payload["drafters"].items():
        rows.append({"decoding": f"speculative, {name} drafter (k = {payload['k']})",
                     "tau: tokens per target pass [95% CI]": estimate_text(s["tau"]),
                     "tokens/s [95% CI]": estimate_text(s["tokens_per_s"], digits=1),
                     "speedup vs plain [95% CI]": estimate_text(s["speedup"]),
                     "answers identical to plain": (f"{s['identical_to_plain']} / {s['prompts']}"
                                                    if payload["temperature"] <= 0 else "(sampled: not comparable)"),
                     "prompts": s["prompts"]})
    return pd.DataFrame(rows)


def acceptance_difference_table(difference: Mapping | None) -> pd.DataFrame:
    """The paired OUTLETS - SD-only difference of acceptance per position and of tau, each with a verdict."""
    if difference is None:
        return pd.DataFrame()
    first, second = difference["pair"]
    rows = [(f"acceptance, position {i + 1}", est) for i, est in enumerate(difference["acceptance"])]
    rows.append(("tau", difference["tau"]))
    out = []
    for what, est in rows:
        defined = est.get("lo") is not None
        verdict = paired_verdict(est["lo"], est["hi"], int(est.get("n") or 0), NO_LOSS) if defined else ""
        out.append({"measure": what, f"{first} - {second} [95% CI]": estimate_text(est, signed=True),
                    "prompts": est.get("n"),
                    "verdict": verdict})
    return pd.DataFrame(out)


def live_tokens_html(cycles: Sequence) -> str:
    """A live answer as HTML: drafted tokens the target accepted in green, the target's corrections of rejected
    drafts in orange, its own tokens (first token, bonus tokens) in grey."""
    spans = []
    for c in cycles:
        for token in c.accepted:
            spans.append((token, "accepted"))
        if c.token:
            spans.append((c.token, "correction" if c.correction else "target"))
    body = "".join(f'<span style="color:{COLOURS[kind]}">{html.escape(token)}</span>' for token, kind in spans)
    legend = " · ".join(f'<span style="color:{COLOURS[k]}">{label}</span>' for k, label in
                        (("accepted", "drafted and accepted"), ("correction", "target's correction"),
                         ("target", "target's own token")))
    return (f'<div style="font-size:0.85em">{legend}</div>'
            f'<div style="white-space:pre-wrap;font-family:monospace;line-height:1.5">{body}</div>')
