"""The rendered blocks: each name a file's markers may use, and the code that writes its markdown from the shipped
study (``data/results``, read through :class:`~lenscope.jobs.study.shipped.ShippedStudy`, the same reader the
pages use) and the benchmarks' records (``data/benchmarks``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from lenscope.analysis.core.verdicts import VERDICT_MEANINGS
from lenscope.benchmarks.records import read_records, records_markdown
from lenscope.cli.benchmark import available
from lenscope.docs.cli_reference import cli_reference
from lenscope.docs.regions import RegionError
from lenscope.figures.attribution import head_summary_display
from lenscope.figures.drafter import drafter_ablation_tables
from lenscope.figures.drafter_live import acceptance_difference_table, speculative_table
from lenscope.figures.egtp import ablation_pivot, paired_table
from lenscope.figures.markdown import source_note, table
from lenscope.jobs.results.claims import claims_markdown, head_options_markdown, predictors_markdown
from lenscope.jobs.scheduler.replay import format_seed_table, preset_seed_table
from lenscope.jobs.study.shipped import RESULTS_DIR, ShippedStudy, shipped_study
from lenscope.jobs.study.tour import tour
from lenscope.store.settings import SHIPPED_DATA

SCENARIOS = ("chat", "long", "reasoning", "rl")
PLP_STEPS = (0, 1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Sources:
    """Where the numbers come from: the shipped results folder and the benchmarks' records folder."""

    results: Path = RESULTS_DIR
    benchmarks: Path = SHIPPED_DATA / "benchmarks"

    @cached_property
    def study(self) -> ShippedStudy:
        study = shipped_study(self.results)
        if study is None:
            raise FileNotFoundError(f"no shipped results in {self.results} (its manifest.json is missing)")
        return study

    def built(self) -> str:
        m = self.study.manifest
        return f"dataset {m['dataset']!r} of {m['model']}, built {m['created'][:10]}"


def _missing(what: str) -> str:
    return f"*Not in the shipped results: {what}.*"


def dataset_block(src: Sources) -> str:
    """Runs per scenario (finished, censored at the cap, lengths) and the single split's finished runs."""
    runs = src.study.runs()
    rows = []
    for name, group in [*runs.groupby("scenario", sort=False), ("all", runs)]:
        finished = group[~group["censored"].astype(bool)]
        rows.append({"scenario": name, "runs": len(group), "prompts": group["prompt_id"].nunique(),
                     "finished": f"{len(finished):,} ({len(finished) / len(group):.1%})",
                     "censored at the cap": f"{len(group) - len(finished):,} ({1 - len(finished) / len(group):.1%})",
                     "median finished length": f"{finished['output_tokens'].median():.0f}",
                     "answer tokens": int(group["output_tokens"].sum())})
    finished = runs[~runs["censored"].astype(bool)]
    splits = pd.crosstab(finished["split"], finished["scenario"], margins=True, margins_name="all")
    splits = splits.reindex(["train", "val", "test", "all"]).rename_axis("split (finished runs)").reset_index()
    splits.columns.name = None
    return "\n".join([table(pd.DataFrame(rows)), "", table(splits),
                      source_note(f"From `data/results/runs.csv.gz` ({src.built()}); the split is fold 0 of the "
                                  "grouped folds.")])


def findings_block(src: Sources) -> str:
    """The tour's five stops: our number with its intervals (each named by its level) beside the paper's, what it
    is, and what it rests on."""
    rows = [{"step": stop.title, "what": stop.detail, "ours": stop.number, "intervals": stop.interval,
             "paper": stop.paper, "verdict": stop.verdict, "rests on": stop.rests_on} for stop in tour(src.study)]
    return table(pd.DataFrame(rows)) + "\n" + source_note(f"The Home page's guided tour, from `data/results` "
                                                          f"({src.built()}).")


def verdicts_block(src: Sources) -> str:
    """What each verdict label means, as :mod:`lenscope.analysis.core.verdicts` states it."""
    return table(pd.DataFrame(VERDICT_MEANINGS, columns=["verdict", "given when"])) + "\n" + source_note(
        "From `analysis/core/verdicts.py`. A claim is judged on its Holm-adjusted CI; the paper's effect is its "
        "relative MAE change scaled to our MAE.")


def _claims(src: Sources, scenario: str | None) -> str:
    payload = src.study.claims()
    if payload is None:
        return _missing("the claims")
    rows = payload["claims"] if scenario is None else payload.get("by_scenario", {}).get(scenario)
    if not rows:
        return _missing(f"the claims of scenario {scenario}")
    c = payload["config"]
    only = "" if scenario is None else f", {scenario} only"
    return claims_markdown(pd.DataFrame(rows)) + "\n" + source_note(
        f"`data/results/claims.json` ({src.built()}): {c['folds']}-fold cross-validation grouped by conversation, "
        f"{c['seeds']} training seeds, every finished run out of fold{only}.")


def _claims_part(key: str, what: str, markdown: Callable[[pd.DataFrame], str]) -> Callable[[Sources], str]:
    """A block of one table of the claims payload (``predictors``, ``head_options``)."""

    def block(src: Sources) -> str:
        payload = src.study.claims()
        if payload is None or not payload.get(key):
            return _missing(what)
        return markdown(pd.DataFrame(payload[key])) + "\n" + source_note(f"`data/results/claims.json` ({src.built()}).")

    return block


def pooling_block(src: Sources) -> str:
    payload = src.study.pooling_ablation()
    if payload is None:
        return _missing("the pooling ablation")
    return "\n".join([table(ablation_pivot(payload["rows"]).reset_index()), "", table(paired_table(payload["paired"])),
                      source_note(f"`data/results/pooling_ablation.json` ({src.built()}): test split, layer "
                                  f"{src.study.layer}, paired bootstrap 95% CIs over prompts.")])


def plp_block(src: Sources) -> str:
    curve = src.study.plp_curve()
    if curve is None:
        return _missing("the PLP curve")
    shown = curve[curve["step"].isin(PLP_STEPS)].rename(columns={"step": "observed step", "mae": "PLP test MAE",
                                                                "n": "runs"})
    return table(shown) + "\n" + source_note(f"`data/results/plp_curve.csv` ({src.built()}): test runs still "
                                             "generating at each step.")


def attribution_block(src: Sources) -> str:
    found = src.study.evidence()
    if found is None:
        return _missing("the attribution evidence")
    payload = found[1]
    verdicts = [f"- {text}." for text in payload["verdicts"].values()]
    return "\n".join([*verdicts, f"- {payload['positive_control']}.", "", table(head_summary_display(payload["heads"])),
                      source_note(f"`data/results/attribution.json.gz` ({src.built()}): {payload['runs']['test']} "
                                  f"test runs; the paper's r = {payload['paper_pearson']}.")])


def drafter_ablation_block(src: Sources) -> str:
    payload = src.study.drafter_ablation()
    if payload is None:
        return _missing("the drafter ablation")
    maes, pairs = drafter_ablation_tables(payload)
    return "\n".join([table(maes), "", table(pairs), source_note(
        f"`data/results/drafter_ablation.json` ({src.built()}): test split, steps 0-32, paired bootstrap 95% CIs "
        "over prompts, one training seed each.")])


def speculative_block(src: Sources) -> str:
    found = src.study.speculative()
    if found is None:
        return _missing("live speculative decoding")
    settings, payload = found
    parts = [table(speculative_table(payload))]
    difference = acceptance_difference_table(payload.get("difference"))
    if not difference.empty:
        parts += ["", table(difference)]
    parts.append(source_note(f"`data/results/speculative.json` ({src.built()}): {settings['n_prompts']} prompts, "
                             f"k = {settings['k']}, {settings['max_new_tokens']} new tokens, temperature "
                             f"{settings['temperature']}; 95% CIs over prompts."))
    return "\n".join(parts)


def preset_block(src: Sources) -> str:
    preset = src.study.preset()
    if preset is None:
        return _missing("the scheduler preset")
    parts = []
    for workload, result in preset.get("workloads", {}).items():
        parts += [f"**{workload} workload.** {result['note']}.", "",
                  table(format_seed_table(preset_seed_table(pd.DataFrame(result["per_seed"])))), ""]
    parts.append(source_note(f"`data/results/preset.json` ({src.built()}): 1 prefill + 3 decode instances; means "
                             "over seeds with 95% Student-t intervals."))
    return "\n".join(parts)


def benchmarks_block(src: Sources) -> str:
    """Every benchmark's latest record, then the benchmarks with none yet (said, not left out)."""
    records = read_records(src.benchmarks)
    missing = [name for name in available() if name not in {r.benchmark for r in records}]
    parts = [records_markdown(records)] if records else []
    if missing:
        parts.append("**No record yet:** " + ", ".join(f"`{name}`" for name in missing)
                     + " (`python -m lenscope benchmark NAME` writes one).")
    return "\n\n".join(parts)


BLOCKS: dict[str, Callable[[Sources], str]] = {
    "dataset": dataset_block,
    "findings": findings_block,
    "verdicts": verdicts_block,
    "claims": lambda src: _claims(src, None),
    **{f"claims-{s}": (lambda src, s=s: _claims(src, s)) for s in SCENARIOS},
    "predictors": _claims_part("predictors", "the predictors' out-of-fold MAE", predictors_markdown),
    "head-options": _claims_part("head_options", "the head options", head_options_markdown),
    "pooling": pooling_block,
    "plp": plp_block,
    "attribution": attribution_block,
    "drafter-ablation": drafter_ablation_block,
    "speculative": speculative_block,
    "preset": preset_block,
    "benchmarks": benchmarks_block,
    "cli": lambda src: cli_reference(),
}


class Renderer:
    """Renders blocks by name from ``sources``, each once per renderer (a file may hold a block twice)."""

    def __init__(self, sources: Sources = Sources()) -> None:
        self.sources = sources
        self._done: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if name not in BLOCKS:
            raise RegionError(f"no rendered block {name!r}; the blocks are: {', '.join(BLOCKS)}")
        if name not in self._done:
            self._done[name] = BLOCKS[name](self.sources).strip("\n")
        return self._done[name]
