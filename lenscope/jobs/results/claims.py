"""The papers' claims judged on out-of-fold predictions of grouped K-fold cross-validation, with training seeds in
the uncertainty, Holm-adjusted CIs and verdicts that read the effect size (:mod:`lenscope.analysis.core.verdicts`).

Each claim is a paired MAE difference ``A - B`` (negative: the claim holds) over the finished runs both predicted,
with one bootstrap that resamples conversations (leak groups) and each predictor's training seeds. The family
corrected with Holm is every judged row of one claims table (its size is each judged row's ``family``). A baseline
against the median constant is a baseline check, claimed by no paper, with the check's own verdicts
(:func:`row_verdict`); :func:`relabelled` gives a stored payload the labels of this version from its numbers.
Each row also gives the clipped MAE difference over all runs, censored ones included
(:func:`lenscope.analysis.core.metrics.clipped_errors`). The reference is the training folds' median (at step t:
the median remaining length of the training runs still generating at t). Predictors trained on one split only
(the drafters: about 45 minutes a training on 2 cores) are scored on the runs whose conversation they never saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lenscope.analysis.core.metrics import BootstrapDraws, bounds_text, ci_text, clipped_errors, seeded_bootstrap
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.splits import FOLDS
from lenscope.analysis.core.verdicts import (
    BASELINE_CHECK,
    MIN_PROMPTS,
    check_verdict,
    effect_verdict,
    holm_levels,
    interval_label,
    level_text,
    scaled_effect,
)
from lenscope.analysis.papers import EGTP_PLP_FALL, EGTP_PLP_MAE, EGTP_POOLING_MAE, EGTP_VS_BASELINES
from lenscope.figures.markdown import table as markdown_table
from lenscope.jobs.drafter.training import drafter_name
from lenscope.jobs.egtp.heads import HEAD_VARIANTS
from lenscope.jobs.predictors.baselines import BASELINES
from lenscope.jobs.results.crossval import MAX_STEP, cv_runs, oof_predictions, runs_digest
from lenscope.jobs.results.cv_learners import (
    CENSORING_AWARE,
    CONSTANT,
    StudyInputs,
    static_name,
    study_learners,
)
from lenscope.models.target import TargetModel
from lenscope.store.store import Store

CLAIMS_KIND = "study_claims"
PLP_STEP = MAX_STEP
DRAFTERS = {"OUTLETS drafter": "outlets", "SD-only drafter": "sd-only"}


@dataclass(frozen=True)
class ClaimSpec:
    """``first < second`` on static (step 0) or dynamic (steps 0..32) predictions, with the paper's relative MAE
    change of ``first`` against ``second`` when it gives one."""

    claim: str
    paper: str
    first: str
    second: str
    dynamic: bool = False
    paper_relative: float | None = None


def is_baseline_check(first: str, second: str) -> bool:
    """Whether ``first < second`` is a baseline check: a baseline against the median constant, claimed by no paper
    (a sanity check of the baseline, not a paper's claim)."""
    return first.startswith("baseline ") and second == CONSTANT


def _rel(first: str, second: str) -> float:
    paper = EGTP_POOLING_MAE.set_index("pooling")["mean_mae"]
    return float(paper[first] / paper[second] - 1)


def claim_specs(names: Sequence[str], probe: str) -> list[ClaimSpec]:
    """The claims of the study over the predictors ``names`` (learners and stored drafters)."""
    paper = EGTP_POOLING_MAE.set_index("pooling")["mean_mae"]
    egtp = static_name("egtp")
    specs = [ClaimSpec(f"EGTP pooling < {p} pooling (static)", f"{paper['egtp']:.1f} vs {paper[p]:.1f} (ForeLen "
                       f"mean, {_rel('egtp', p):+.1%})", egtp, static_name(p), paper_relative=_rel("egtp", p))
             for p in ("max", "last", "mean")]
    learned = [n for n in names if n != CONSTANT and "," not in n]  # not the head options (compared elsewhere)
    dynamic = {"PLP", probe, *DRAFTERS}
    specs += [ClaimSpec(f"{n} < median constant ({'dynamic, steps 0-32' if n in dynamic else 'static'})",
                        BASELINE_CHECK if is_baseline_check(n, CONSTANT) else "implied by both papers", n, CONSTANT,
                        n in dynamic) for n in learned]
    specs.append(ClaimSpec("OUTLETS drafter < target probe (dynamic, steps 0-32)",
                           "OUTLETS: drafter below MLP probes (all settings)", "OUTLETS drafter", probe, True))
    specs += [ClaimSpec(f"EGTP head < {b} (static)",
                        f"EGTP: {rel:+.1%} (vs {'SSJF-Reg' if b == 'ssjf-reg' else 'the strongest baseline'}, "
                        "mean over models)", egtp, f"baseline {b}", paper_relative=rel)
              for b, rel in EGTP_VS_BASELINES.items()]
    return specs


@dataclass
class Scored:
    """One predictor's out-of-fold rows, as (run_id, step)-indexed matrices over its training seeds."""

    predicted: pd.DataFrame  # rows x seeds
    meta: pd.DataFrame       # true, censored, group, prompt_id, scenario per row

    @classmethod
    def of(cls, frame: pd.DataFrame) -> Scored:
        predicted = frame.pivot_table(index=["run_id", "step"], columns="seed", values="predicted")
        meta = frame.drop_duplicates(["run_id", "step"]).set_index(["run_id", "step"])
        return cls(predicted.dropna(), meta[["true", "censored", "group", "prompt_id", "scenario"]])

    def errors(self, rows: pd.Index, clipped: bool = False) -> np.ndarray:
        """[seeds, rows] absolute errors (clipped: a censored row scores only a prediction under its bound)."""
        pred = self.predicted.loc[rows].to_numpy().T
        meta = self.meta.loc[rows]
        true = meta["true"].to_numpy(dtype=float)
        if not clipped:
            return np.abs(pred - true)
        censored = meta["censored"].to_numpy(dtype=bool)
        return np.stack([clipped_errors(p, true, censored, true) for p in pred])


def _rows(a: Scored, b: Scored, dynamic: bool, scenario: str | None, finished: bool) -> pd.Index:
    rows = a.predicted.index.intersection(b.predicted.index)
    meta = a.meta.loc[rows]
    keep = (meta.index.get_level_values("step") <= MAX_STEP) if dynamic else (meta.index.get_level_values("step") == 0)
    if finished:
        keep &= ~meta["censored"].to_numpy(dtype=bool)
    if scenario is not None:
        keep &= (meta["scenario"] == scenario).to_numpy()
    return rows[keep].sort_values()


def _difference(a: Scored, b: Scored, rows: pd.Index, clipped: bool = False) -> BootstrapDraws:
    return seeded_bootstrap([(a.errors(rows, clipped), 1.0), (b.errors(rows, clipped), -1.0)],
                            a.meta.loc[rows, "group"])


def _fall(plp: Scored, rows_at: dict[int, pd.Index], against: Scored | None = None) -> BootstrapDraws:
    """MAE at step 32 minus MAE at step 0 over the runs still generating at 32 (minus the constant's own fall)."""
    if not np.array_equal(rows_at[0].get_level_values(0), rows_at[PLP_STEP].get_level_values(0)):
        raise ValueError("the step-0 and step-32 rows must be the same runs in the same order")
    terms = [(plp.errors(rows_at[PLP_STEP]) - plp.errors(rows_at[0]), 1.0)]
    if against is not None:
        terms.append((against.errors(rows_at[PLP_STEP]) - against.errors(rows_at[0]), -1.0))
    return seeded_bootstrap(terms, plp.meta.loc[rows_at[0], "group"])


def _row(spec: ClaimSpec, draws: BootstrapDraws | None, reference_mae: float | None, runs: int, prompts: int,
         clipped: BootstrapDraws | None = None, clipped_runs: int = 0, why: str = "") -> dict:
    base = {"claim": spec.claim, "paper": spec.paper, "first": spec.first, "second": spec.second,
            "paper_effect": None, "difference": None, "lo": None, "hi": None, "lo95": None, "hi95": None,
            "level": None, "family": None, "p_value": np.nan, "runs": runs, "prompts": prompts,
            "clipped_difference": None, "clipped_lo": None, "clipped_hi": None, "clipped_runs": clipped_runs,
            "verdict": f"not measured ({why})" if why else ""}
    if draws is None:
        return base
    lo95, hi95 = draws.ci(0.95)
    base.update(difference=draws.value, lo95=lo95, hi95=hi95, p_value=draws.p_value(), _draws=draws,
                paper_effect=scaled_effect(spec.paper_relative, reference_mae) if reference_mae else None)
    if clipped is not None:
        base.update(clipped_difference=clipped.value, **dict(zip(("clipped_lo", "clipped_hi"), clipped.ci(0.95))))
    return base


def judge(specs: Sequence[ClaimSpec], scored: dict[str, Scored], scenario: str | None = None,
          extra: Sequence[tuple[ClaimSpec, str]] = (), alpha: float = 0.05) -> pd.DataFrame:
    """Every claim of ``specs`` (and the PLP-fall claims ``extra``: (spec, ``fall`` or ``fall vs constant``))
    judged on ``scored`` predictions, restricted to one ``scenario`` when given; Holm over the judged rows."""
    rows = []
    for spec in specs:
        a, b = scored.get(spec.first), scored.get(spec.second)
        if a is None or b is None:
            missing = spec.first if a is None else spec.second
            rows.append(_row(spec, None, None, 0, 0, why=f"{missing} has no out-of-fold predictions"))
            continue
        finished = _rows(a, b, spec.dynamic, scenario, finished=True)
        everything = _rows(a, b, spec.dynamic, scenario, finished=False)
        if finished.empty:
            rows.append(_row(spec, None, None, 0, 0, why="no runs in common"))
            continue
        prompts = int(a.meta.loc[finished, "prompt_id"].nunique())
        reference = float(b.errors(finished).mean())
        clipped = _difference(a, b, everything, clipped=True) if len(everything) > len(finished) else None
        rows.append(_row(spec, _difference(a, b, finished), reference, finished.get_level_values(0).nunique(),
                         prompts, clipped, everything.get_level_values(0).nunique()))
    for spec, kind in extra:
        plp, constant = scored.get("PLP"), scored.get(CONSTANT)
        if plp is None or (kind != "fall" and constant is None):
            rows.append(_row(spec, None, None, 0, 0, why="PLP has no out-of-fold predictions"))
            continue
        at = {t: _rows(plp, plp if constant is None else constant, True, scenario, True) for t in (0, PLP_STEP)}
        at = {t: r[r.get_level_values("step") == t] for t, r in at.items()}
        alive = at[PLP_STEP].get_level_values(0)
        at[0] = at[0][at[0].get_level_values(0).isin(alive)]
        if at[0].empty:
            rows.append(_row(spec, None, None, 0, 0, why=f"no finished run reaches step {PLP_STEP}"))
            continue
        draws = _fall(plp, at, None if kind == "fall" else constant)
        prompts = int(plp.meta.loc[at[0], "prompt_id"].nunique())
        rows.append(_row(spec, draws, float(plp.errors(at[0]).mean()), len(alive), prompts))
    return _holm(pd.DataFrame(rows), alpha)


def _holm(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Holm-adjusted CIs and the verdicts of the judged rows (too few prompts: no verdict, not in the family)."""
    judged = table["difference"].notna() & (table["prompts"] >= MIN_PROMPTS)
    p = np.where(judged, table["p_value"].astype(float), np.nan)
    table["level"] = holm_levels(p, alpha)
    table["family"] = [int(judged.sum()) if j else None for j in judged]
    for i in table.index:
        if pd.isna(table.at[i, "difference"]):
            continue
        draws = table.at[i, "_draws"]
        if judged[i]:
            table.at[i, "lo"], table.at[i, "hi"] = draws.ci(float(table.at[i, "level"]))
        else:
            table.at[i, "lo"], table.at[i, "hi"] = table.at[i, "lo95"], table.at[i, "hi95"]
        table.at[i, "verdict"] = row_verdict(table.loc[i])
    return table.drop(columns="_draws", errors="ignore")


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def row_verdict(row: Mapping) -> str:
    """The verdict of a measured claims row from its stored numbers (``lo``, ``hi``, ``prompts``, ``paper_effect``,
    ``first``, ``second``): a baseline check's, else the effect-size verdict
    (:mod:`lenscope.analysis.core.verdicts`)."""
    if is_baseline_check(row["first"], row["second"]):
        return check_verdict(float(row["lo"]), float(row["hi"]), int(row["prompts"]))
    return effect_verdict(float(row["lo"]), float(row["hi"]), int(row["prompts"]), _number(row["paper_effect"]))


def relabel_rows(rows: list[dict]) -> list[dict]:
    """One stored claims table with the labels of this version, from its numbers alone (none is recomputed): each
    baseline check's ``paper``, each measured row's verdict, and each judged row's ``family`` (the table's number
    of judged rows: those with a Holm level)."""
    family = sum(_number(r.get("level")) is not None for r in rows)
    out = []
    for r in rows:
        row = {**r, "family": family if _number(r.get("level")) is not None else None}
        if is_baseline_check(r["first"], r["second"]):
            row["paper"] = BASELINE_CHECK
        if _number(r.get("difference")) is not None:
            row["verdict"] = row_verdict(row)
        out.append(row)
    return out


def relabelled(payload: dict) -> dict:
    """A claims payload (stored or shipped, of any version) with the labels of this version: :func:`relabel_rows`
    of its table and of every scenario's."""
    return {**payload, "claims": relabel_rows(payload["claims"]),
            "by_scenario": {k: relabel_rows(v) for k, v in payload.get("by_scenario", {}).items()}}


def row_intervals(row: Mapping) -> tuple[str, str]:
    """The labels of a row's plain (``lo95``/``hi95``) and Holm-adjusted (``lo``/``hi``) intervals."""
    return interval_label(), interval_label(_number(row.get("level")), row.get("family"))


def plp_fall_specs() -> list[tuple[ClaimSpec, str]]:
    paper = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in EGTP_PLP_MAE.items()) + f" (mean {EGTP_PLP_FALL:+.1%})"
    return [(ClaimSpec(f"PLP MAE falls from step 0 to step {PLP_STEP}", paper, "PLP", "PLP", True, EGTP_PLP_FALL),
             "fall"),
            (ClaimSpec(f"PLP MAE falls from step 0 to step {PLP_STEP} more than the median constant's", paper,
                       "PLP", CONSTANT, True), "fall vs constant")]


def dataset_predictors(store: Store, dataset: str) -> dict[str, int]:
    """Name -> id of every predictor trained on ``dataset``."""
    predictors = store.predictors_frame()
    own = predictors[predictors["dataset_id"] == store.dataset_id(dataset)]
    return {name: int(pid) for name, pid in zip(own["name"], own["predictor_id"])}


def stored_out_of_sample(store: Store, name: str, runs: pd.DataFrame) -> pd.DataFrame | None:
    """A predictor trained on one split (e.g. a drafter), as seed-0 out-of-fold rows: its predictions on runs of
    conversations (leak groups) it never trained or validated on; None when it is not stored."""
    predictors = store.predictors_frame()
    row = predictors[predictors["name"] == name]
    if row.empty:
        return None
    frame = store.predictions_frame(int(row["predictor_id"].iloc[0]))
    groups = runs.set_index("run_id")["group"]
    frame = frame[frame["run_id"].isin(groups.index)]
    seen = set(groups.loc[frame.loc[frame["split"] != "test", "run_id"].unique()])
    frame = frame[~frame["run_id"].map(groups).isin(seen) & (frame["step"] <= MAX_STEP)]
    meta = runs.set_index("run_id")[["censored", "group", "prompt_id", "scenario"]]
    return frame[["run_id", "step", "predicted", "true"]].assign(seed=0, fold=-1).join(meta, on="run_id")


@dataclass
class ClaimsReport:
    """The claims on all runs and per scenario, each learner's MAE with its seed-to-seed spread, the head options
    and the censoring-aware head against the default head."""

    claims: pd.DataFrame
    by_scenario: dict[str, pd.DataFrame]
    predictors: pd.DataFrame
    head_options: pd.DataFrame
    config: dict
    scored: dict[str, Scored]

    def out_of_fold(self) -> pd.DataFrame:
        """Every predictor's out-of-fold prediction of every run and step, averaged over its training seeds
        (columns predictor, run_id, step, predicted, seeds, true, censored, prompt_id, scenario)."""
        parts = [s.meta.assign(predicted=s.predicted.mean(1), seeds=s.predicted.shape[1], predictor=name)
                 for name, s in self.scored.items()]
        columns = ["predictor", "run_id", "step", "predicted", "seeds", "true", "censored", "prompt_id", "scenario"]
        return pd.concat(parts).dropna(subset=["predicted"]).reset_index()[columns]


def predictor_summary(scored: dict[str, Scored]) -> pd.DataFrame:
    """MAE [95% CI] of each predictor over its finished rows (static: step 0; dynamic: steps 0..32), the spread of
    the per-seed MAEs, and its clipped MAE over all rows."""
    out = []
    for name, s in scored.items():
        steps = s.predicted.index.get_level_values("step")
        dynamic = bool((steps > 0).any())
        rows = s.predicted.index[(steps <= MAX_STEP) if dynamic else (steps == 0)]
        finished = rows[~s.meta.loc[rows, "censored"].to_numpy(dtype=bool)]
        if finished.empty:  # e.g. every out-of-fold row it predicted is censored: nothing to score
            continue
        err = s.errors(finished)
        est = seeded_bootstrap([(err, 1.0)], s.meta.loc[finished, "group"]).estimate()
        per_seed = err.mean(1)
        clipped = s.errors(rows, clipped=True).mean()
        out.append({"predictor": name, "steps": "0-32" if dynamic else "0", "mae": est.value, "mae_lo": est.lo,
                    "mae_hi": est.hi, "seeds": len(per_seed), "seed_min": per_seed.min(), "seed_max": per_seed.max(),
                    "seed_sd": per_seed.std(ddof=1) if len(per_seed) > 1 else 0.0, "clipped_mae": clipped,
                    "runs": finished.get_level_values(0).nunique(), "all_runs": rows.get_level_values(0).nunique(),
                    "prompts": int(s.meta.loc[finished, "prompt_id"].nunique())})
    return pd.DataFrame(out)


def head_options(scored: dict[str, Scored]) -> pd.DataFrame:
    """Each head option (and the censoring-aware head) minus the default EGTP head: MAE over finished runs and
    clipped MAE over all runs, paired 95% CIs, and the share of censored runs the head ranks in its longest
    quarter (what shortest-job-first needs of them)."""
    default = scored.get(static_name("egtp"))
    out = []
    for option in [*HEAD_VARIANTS, CENSORING_AWARE]:
        other = scored.get(static_name("egtp", option))
        if default is None or other is None:
            continue
        finished = _rows(other, default, False, None, True)
        everything = _rows(other, default, False, None, False)
        diff = _difference(other, default, finished)
        row = {"option": option, "difference": diff.value, **dict(zip(("lo", "hi"), diff.ci())),
               "prompts": int(other.meta.loc[finished, "prompt_id"].nunique())}
        if len(everything) > len(finished):
            clip = _difference(other, default, everything, clipped=True)
            row.update(clipped_difference=clip.value, **dict(zip(("clipped_lo", "clipped_hi"), clip.ci())),
                       censored_top_quarter=_top_quarter(other, everything),
                       default_censored_top_quarter=_top_quarter(default, everything))
        out.append(row)
    return pd.DataFrame(out)


def _top_quarter(s: Scored, rows: pd.Index) -> float:
    """Share of the censored rows among ``rows`` whose mean prediction is in the top quarter of all of them."""
    pred = s.predicted.loc[rows].mean(1)
    censored = s.meta.loc[rows, "censored"].to_numpy(dtype=bool)
    return float((pred[censored] >= np.quantile(pred, 0.75)).mean()) if censored.any() else float("nan")


def claims_report(store: Store, dataset: str, layer: int, probe_layer: int, folds: int = FOLDS, seeds: int = 3,
                  target: TargetModel | None = None, head_epochs: int = 60, probe_epochs: int = 30,
                  baselines: Sequence[str] = BASELINES, min_scenario_prompts: int = 50,
                  on_progress: Progress = no_progress) -> ClaimsReport:
    """Cross-validate every learner (stored folds and seeds are read back), add the stored drafters' out-of-sample
    predictions, and judge every claim on all runs and per scenario with enough prompts; stores the report."""
    runs = cv_runs(store, dataset)
    inputs = StudyInputs(store, runs, layer, probe_layer, target, on_progress)
    learners = study_learners(inputs, head_epochs, probe_epochs, baselines)
    scored: dict[str, Scored] = {}
    skipped: dict[str, str] = {}
    for i, (name, learner) in enumerate(learners.items()):
        on_progress(i, len(learners), f"cross-validating {name}")
        try:
            scored[name] = Scored.of(oof_predictions(store, dataset, learner, folds, seeds, runs, on_progress))
        except ValueError as exc:  # e.g. a fold with too few training runs
            skipped[name] = str(exc)
    for label, variant in DRAFTERS.items():
        frame = stored_out_of_sample(store, drafter_name(dataset, variant), runs)
        if frame is not None and not frame.empty:
            scored[label] = Scored.of(frame)
    probe = f"target probe (layer {probe_layer})"
    specs = claim_specs(list(scored), probe)
    claims = judge(specs, scored, extra=plp_fall_specs())
    scenarios = {}
    finished = runs[~runs["censored"]]
    for scenario, group in finished.groupby("scenario"):
        if group["prompt_id"].nunique() >= min_scenario_prompts:
            scenarios[scenario] = judge(specs, scored, scenario, plp_fall_specs())
    config = {"dataset": dataset, "folds": folds, "seeds": seeds, "layer": layer, "probe_layer": probe_layer,
              "runs": runs_digest(runs), "skipped": skipped,
              "drafter": dataset_predictors(store, dataset).get(drafter_name(dataset, "outlets"))}
    report = ClaimsReport(claims, scenarios, predictor_summary(scored), head_options(scored), config, scored)
    store.memo(CLAIMS_KIND, {"dataset": dataset},
               lambda: {"claims": _records(claims), "by_scenario": {k: _records(v) for k, v in scenarios.items()},
                        "predictors": _records(report.predictors), "head_options": _records(report.head_options),
                        "config": config},
               name=f"claims {dataset} ({folds}-fold, {seeds} seeds)", refresh=True)
    return report


def _records(frame: pd.DataFrame) -> list[dict]:
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def stored_claims(store: Store, dataset: str) -> dict | None:
    """The claims payload last stored for ``dataset`` (None for one judged before cross-validation, on one
    split: its verdicts do not read the number of prompts)."""
    payload = store.stored(CLAIMS_KIND, {"dataset": dataset})
    return relabelled(payload) if payload is not None and "folds" in payload.get("config", {}) else None


def stored_claims_table(store: Store, dataset: str, scenario: str | None = None) -> pd.DataFrame | None:
    """The stored claims of ``dataset`` (of one scenario's table when given) as a frame, or None."""
    payload = stored_claims(store, dataset)
    if payload is None:
        return None
    rows = payload["claims"] if scenario is None else payload.get("by_scenario", {}).get(scenario)
    return None if rows is None else pd.DataFrame(rows)


def predictors_markdown(table: pd.DataFrame) -> str:
    """Each predictor's out-of-fold MAE [95% CI, prompts and seeds resampled], its seeds' spread and clipped MAE."""
    lines = ["| predictor | steps | MAE [95% CI] | seeds: min-max (SD) | clipped MAE, all runs | prompts (runs; all "
             "runs) |", "|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.predictor} | {r.steps} | {ci_text(r.mae, r.mae_lo, r.mae_hi)} | {r.seed_min:.1f}-"
                     f"{r.seed_max:.1f} ({r.seed_sd:.1f}; {r.seeds}) | {r.clipped_mae:.1f} | {r.prompts} ({r.runs}; "
                     f"{r.all_runs}) |")
    return "\n".join(lines)


def head_options_markdown(table: pd.DataFrame) -> str:
    """Head options minus the default EGTP head, on both metrics."""
    lines = ["| head | MAE difference [95% CI] | clipped MAE difference, all runs [95% CI] | censored runs in the "
             "longest-predicted quarter (default head) |", "|---|---|---|---|"]
    for r in table.itertuples():
        clipped = getattr(r, "clipped_difference", None)
        has_clip = clipped is not None and not pd.isna(clipped)
        clip = ci_text(clipped, r.clipped_lo, r.clipped_hi, signed=True) if has_clip else ""
        quarter = f"{r.censored_top_quarter:.0%} ({r.default_censored_top_quarter:.0%})" if has_clip else ""
        lines.append(f"| {r.option} | {ci_text(r.difference, r.lo, r.hi, signed=True)} | {clip} | {quarter} |")
    return "\n".join(lines)


def holm_family(table: pd.DataFrame) -> int:
    """The size of a claims table's Holm family: its judged rows (those with a level)."""
    return int(pd.to_numeric(table["level"], errors="coerce").notna().sum()) if "level" in table else 0


def claims_display(table: pd.DataFrame) -> pd.DataFrame:
    """The claims as pages, the report and the command line show them (differences in tokens of MAE; negative: the
    claim holds): each interval as text under a header naming its level, the plain 95% CI beside the Holm-adjusted
    one (each row's level in its cell, the table's family in the header; empty for a row outside the family, too
    few prompts), the clipped MAE difference over all runs, and the verdict (read on the Holm-adjusted CI)."""
    holm = f"Holm-adjusted CI (level, family of {holm_family(table)})"
    out = []
    for r in table.to_dict("records"):
        measured = _number(r["difference"]) is not None
        effect, level, clipped = _number(r["paper_effect"]), _number(r.get("level")), _number(r["clipped_difference"])
        out.append({
            "claim": r["claim"], "paper": r["paper"],
            "paper's effect here": "" if effect is None else f"{effect:+.1f}",
            "MAE difference": f"{r['difference']:+.1f}" if measured else "",
            "95% CI": bounds_text(r["lo95"], r["hi95"], "+.1f") if measured else "",
            holm: f"{bounds_text(r['lo'], r['hi'], '+.1f')} ({level_text(level)})" if measured and level is not None
            else "",
            "prompts (runs)": f"{r['prompts']} ({r['runs']})",
            "clipped MAE difference, all runs [95% CI]": "" if clipped is None else
            f"{ci_text(clipped, r['clipped_lo'], r['clipped_hi'], signed=True)} ({r['clipped_runs']} runs)",
            "verdict": r["verdict"]})
    return pd.DataFrame(out)


def claims_markdown(table: pd.DataFrame) -> str:
    """The claims as a markdown table: :func:`claims_display`."""
    return markdown_table(claims_display(table))
