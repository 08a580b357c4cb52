"""A study as one self-contained HTML file (tables and interactive figures, plotly.js embedded once) that a
reviewer opens offline: the dataset, the claims with their CIs, then each page's headline result."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pandas as pd
import plotly.graph_objects as go

from lenscope.analysis.core.verdicts import VERDICT_LEGEND
from lenscope.analysis.papers import EGTP_ATTRIBUTION_R, EGTP_PLP_MAE, EGTP_POOLING_MAE, OUTLETS_SERVING
from lenscope.figures.attribution import evidence_display, head_summary_display
from lenscope.figures.drafter import ablation_table, drafter_ablation_tables
from lenscope.figures.egtp import ablation_pivot, mae_by_step_figure, pooling_ablation_figure
from lenscope.figures.scheduler import outlets_change_figure
from lenscope.jobs.results.claims import claims_display, holm_family
from lenscope.jobs.scheduler.replay import format_seed_table, preset_seed_table
from lenscope.jobs.study.results import StudyResults, claims_table

STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}td,th{border:1px solid #ccc;padding:4px 8px}
th{background:#f3f3f3}h2{margin-top:2em;border-bottom:1px solid #ddd}.note{color:#666}"""


class _Report:
    """Sections in order; the first figure carries plotly.js, the others reuse it."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures = 0

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def note(self, text: str) -> None:
        self.parts.append(f"<p class='note'>{html.escape(text)}</p>")

    def table(self, frame: pd.DataFrame) -> None:
        self.parts.append(frame.to_html(index=False, na_rep="", border=0))

    def figure(self, fig: go.Figure) -> None:
        self.parts.append(fig.to_html(full_html=False, include_plotlyjs=self.figures == 0))
        self.figures += 1

    def html(self, title: str) -> str:
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{''.join(self.parts)}</body></html>")


def study_report(results: StudyResults) -> str:
    """The HTML report of a study's ``results`` (the store's or the shipped ones); sections whose step has not run
    say so."""
    report = _Report()
    dataset, layer = results.dataset, results.layer
    report.note(f"Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by lenscope. {results.caption()}. The claims "
                "are judged on out-of-fold predictions of every finished run "
                "(grouped cross-validation); the other sections on the single split's test runs (fold 0). "
                "Differences are paired bootstrap CIs over prompts, each named by its level (the claims' plain 95% "
                "CI beside their Holm-adjusted one); under 50 prompts nothing is judged.")

    report.heading("The papers' claims")
    claims = claims_table(results)
    if claims is None:
        report.note("Not judged yet: `python -m lenscope claims`.")
    else:
        config = results.claims()["config"]
        report.table(claims_display(claims))
        report.note(f"Out-of-fold predictions of {config['folds']}-fold cross-validation grouped by conversation, "
                    f"{config['seeds']} training seeds; MAE difference < 0 means the claim holds. 95% CI: the plain "
                    "paired bootstrap CI; Holm-adjusted CI: each row's level in its cell, over the family of the "
                    f"table's {holm_family(claims)} judged rows (prompts and seeds resampled); the verdicts read the "
                    f"Holm-adjusted CI, the paper's effect scaled to our MAE. Verdicts: {VERDICT_LEGEND}.")

    report.heading(f"Pooling ablation (static heads, layer {layer})")
    ablation = results.pooling_ablation()
    if ablation is None:
        report.note("Not run yet: `python -m lenscope train-egtp`.")
    else:
        report.table(ablation_pivot(ablation["rows"]).reset_index())
        report.figure(pooling_ablation_figure(pd.DataFrame(ablation["rows"]), EGTP_POOLING_MAE))

    report.heading("Remaining length (PLP): MAE by observed steps")
    curve = results.plp_curve()
    if curve is not None:
        report.figure(mae_by_step_figure(curve, EGTP_PLP_MAE))
    else:
        report.note("Not run yet: `python -m lenscope train-plp`.")

    report.heading("Attribution: entropy vs gradient importance")
    found = results.evidence()
    if found is None:
        report.note("Not run yet: `python -m lenscope attribution --evidence`.")
    else:
        evidence = found[1]
        report.note(f"The fair test: learned attention-pooling heads with no entropy in their path, importances at "
                    f"their input, over {evidence['runs']['test']} test runs (the paper: r = {EGTP_ATTRIBUTION_R}). "
                    "The "
                    "raw r is like for like with the paper's; within runs, importance is divided by its run's mean. "
                    "p: within-run permutations; under 50 prompts nothing is judged.")
        for text in evidence["verdicts"].values():
            report.note(f"Verdict: {text}.")
        report.note(f"{evidence['positive_control']}.")
        report.table(head_summary_display(evidence["heads"]))
        table = evidence_display(evidence["table"], evidence["paper_pearson"])
        report.table(table[table["control"].isin(["raw", "run-normalised", ""]) & table["measure"].isin(
            ["gradient", ""])])

    report.heading("Drafters and probes")
    own = results.predictors()
    own = own[own["kind"].isin(["drafter", "probe"])]
    if own.empty:
        report.note("Not run yet: `python -m lenscope train-drafter` and `train-probe`.")
    else:
        report.table(ablation_table(own))
    ablation = results.drafter_ablation()
    if ablation is not None:
        maes, pairs = drafter_ablation_tables(ablation)
        report.note("Which part of the drafter's gain: the variants beside probes that see what the drafter sees "
                    "(test split, steps 0-32, paired bootstrap CIs over prompts, one training seed each; a positive "
                    "share is what that part earns).")
        report.table(maes)
        report.table(pairs)

    report.heading("Scheduling: the OUTLETS preset (1 prefill + 3 decode)")
    preset = results.preset()
    if preset is None:
        report.note("Not run yet: the study's scheduler-preset step.")
    else:
        report.note(f"The OUTLETS drafter's predictions beside the oracle (the ceiling) and a constant (the floor) "
                    f"on the same requests; means over seeds with 95% Student-t intervals, changes and shares of the "
                    f"oracle's cut paired by seed (paper: {OUTLETS_SERVING['short_p99_change']:+.1%}).")
        for workload, result in preset.get("workloads", {}).items():
            report.note(f"{workload} workload: {result['note']}.")
            report.table(format_seed_table(preset_seed_table(pd.DataFrame(result["per_seed"]))))
        report.figure(outlets_change_figure(preset["changes"], OUTLETS_SERVING["short_p99_change"]))
    return report.html(f"lenscope study report: {dataset}")
