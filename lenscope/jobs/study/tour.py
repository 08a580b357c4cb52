"""The guided tour: five steps of the story (entropy -> pooling -> remaining length -> drafter -> scheduling),
each with the one number that matters, its intervals (each named by its level), what it rests on and its verdict,
read from a study's results (the store's or the shipped ones; nothing is computed here)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from lenscope.analysis.core.metrics import bounds_text
from lenscope.analysis.core.verdicts import interval_label
from lenscope.analysis.papers import EGTP_ATTRIBUTION_R, OUTLETS_SERVING
from lenscope.jobs.drafter.training import drafter_name
from lenscope.jobs.egtp.attribution import evidence_row
from lenscope.jobs.results.claims import PLP_STEP, row_intervals
from lenscope.jobs.scheduler.replay import ORACLE, preset_seed_table
from lenscope.jobs.study.results import StudyResults


@dataclass(frozen=True)
class TourStop:
    """One card: its title, the page it links to, the number (None until its step ran), what the number means,
    the paper's counterpart, the number's intervals (each named by its level: ``95% CI [-6.8, +4.0]``,
    ``Holm-adjusted 99.3% CI (family of 24) [-9.1, +5.4]``), what it rests on (data, training) and its verdict
    (empty where nothing is judged)."""

    title: str
    page: str
    value: str | None
    detail: str
    paper: str
    intervals: tuple[str, ...] = ()
    rests_on: str = ""
    verdict: str = ""

    @property
    def number(self) -> str:
        """The card's headline: the number alone (``0.063``, ``-1.0``, ``+1.0%``), or a dash until it is measured."""
        return "—" if self.value is None else self.value

    @property
    def interval(self) -> str:
        """The number's intervals as the card's second line, each named by its level, empty without one."""
        return " · ".join(self.intervals)


def _claim(claims: list[dict], starts: str) -> dict | None:
    return next((c for c in claims if c["claim"].startswith(starts) and pd.notna(c["difference"])), None)


def _claim_stop(title: str, page: str, claim: dict | None, what: str, paper: str, rests_on: str) -> TourStop:
    """A claim's card: the MAE difference, its plain 95% CI beside its Holm-adjusted CI (the verdict's), and the
    verdict; a row outside the Holm family (too few prompts) has its 95% CI only."""
    if claim is None:
        return TourStop(title, page, None, f"{what}: not measured yet", paper)
    plain, holm = row_intervals(claim)
    intervals = (f"{plain} {bounds_text(claim['lo95'], claim['hi95'], '+.1f')}",)
    judged = holm != plain
    if judged:
        intervals += (f"{holm} {bounds_text(claim['lo'], claim['hi'], '+.1f')}",)
    return TourStop(title, page, f"{claim['difference']:+.1f}", intervals=intervals, rests_on=rests_on, paper=paper,
                    detail=f"{what} (tokens of MAE, out of fold, {claim.get('prompts', 0)} prompts, {claim['runs']} "
                           "runs)",
                    verdict=f"{claim['verdict']}{' (on the Holm-adjusted CI)' if judged else ''}")


def _r_text(row: dict) -> str:
    """``r = 0.135 (95% CI [0.111, 0.163])`` of an evidence row."""
    return f"r = {row['pearson']:.3f} ({interval_label()} {bounds_text(row['pearson_lo'], row['pearson_hi'], '.3f')})"


def _entropy_stop(found: tuple[dict, dict] | None) -> TourStop:
    """The fair test: the learned attention head's within-run r first (each run's importances divided by their
    mean: no between-run part), then its raw r (like for like with the paper's, partly between-run: mean pooling,
    which weights no token by entropy, gets a raw r too), the verdict and the positive control."""
    title, page, paper = "1 · Entropy", "pages/2_Attribution.py", f"EGTP paper: r = {EGTP_ATTRIBUTION_R}"
    payload = None if found is None else found[1]
    raw = None if payload is None else evidence_row(payload)
    if raw is None:
        return TourStop(title, page, None, "entropy vs gradient importance of a learned attention-pooling head: not "
                        "measured yet (the study's attribution-evidence step)", paper)
    within = evidence_row(payload, control="run-normalised") or raw
    mean = evidence_row(payload, head="mean pooling")
    between = ("" if mean is None else f", partly between-run: mean pooling, which weights no token by entropy, gets "
               f"{_r_text(mean)}")
    head = "within-run Pearson r (each run's importances divided by their mean)" if within is not raw else "raw r"
    settings = found[0]
    return TourStop(title, page, f"{within['pearson']:.3f}",
                    f"{head} of token entropy with gradient importance I_t = ||dL_MSE/dh_t|| of a learned "
                    f"attention-pooling head, no entropy in its path; raw {_r_text(raw)}{between}", paper,
                    (f"{interval_label()} {bounds_text(within['pearson_lo'], within['pearson_hi'], '.3f')}",),
                    f"{within['n_tokens']:,} tokens of {within['n_runs']} test prompts; the head trained on the train "
                    f"split for up to {settings.get('epochs', '?')} epochs (its best validation epoch kept)",
                    f"{payload['verdict']}. {payload['positive_control']}")


def drafter_epochs(results: StudyResults) -> int | None:
    """The training epochs of the study's OUTLETS drafter (the one the claims and the scheduler preset read)."""
    predictors = results.predictors()
    row = predictors[predictors["name"] == drafter_name(results.dataset, "outlets")]
    config = row["config"].iloc[0] if not row.empty else None
    return config.get("epochs") if isinstance(config, dict) else None


def _epochs_text(epochs: int | None) -> str:
    return "an unknown number of epochs" if epochs is None else f"{epochs} epoch{'s' if epochs != 1 else ''}"


def preset_draw(note: str) -> tuple[int, int] | None:
    """(requests per seed, distinct runs they are resampled from) of a scheduler preset's workload note."""
    found = re.match(r"(\d+) requests drawn .*? of the (\d+) requests", note)
    return None if found is None else (int(found[1]), int(found[2]))


def scheduling_stop(preset: dict | None, epochs: int | None = None) -> TourStop:
    """The drafter's LB+SJF short-request P99 change over the preset's seeds, between the constant's (the floor)
    and the oracle's (the ceiling) on the same workload, and what it rests on: the drafter's training epochs and
    the requests resampled from the test runs."""
    title, page = "5 · Scheduling", "pages/6_Scheduler_playground.py"
    paper = f"OUTLETS paper: {OUTLETS_SERVING['short_p99_change']:+.1%}"
    if preset is None or "workloads" not in preset:
        return TourStop(title, page, None, "short-request P99 latency, LB+SJF vs RR+FCFS: not measured yet (the "
                        "study's scheduler-preset step)", paper)
    table = preset_seed_table(pd.DataFrame(preset["workloads"]["uniform"]["per_seed"]))
    rows = table[table["policy"] == "LB+SJF"].set_index("predictor")
    seeds = int(rows.loc[preset["predictor"], "seeds"])
    level = f"95% t interval over {seeds} seeds"

    def change(name: str) -> str:
        r = rows.loc[name]
        return f"{r.short_p99_change:+.1%} {bounds_text(r.short_p99_change_lo, r.short_p99_change_hi, '+.1%')}"

    drafter, oracle = preset["predictor"], ORACLE.label()
    constant = next(n for n in rows.index if n not in (drafter, oracle))
    number, _, bounds = change(drafter).partition(" ")
    note = preset["workloads"]["uniform"]["note"]
    draw = preset_draw(note)
    requests = (f"{draw[0]:,} requests per seed resampled from {draw[1]} distinct test runs (prompts <= "
                f"{OUTLETS_SERVING['max_prompt_tokens']} tokens)" if draw else note)
    return TourStop(title, page, number,
                    f"short-request P99 latency, LB+SJF vs RR+FCFS, 1 prefill + 3 decode, the OUTLETS drafter's "
                    f"out-of-sample predictions; on the same requests the oracle gives {change(oracle)} (the ceiling) "
                    f"and a constant of {preset['constant']:.0f} tokens {change(constant)} (the floor), each with "
                    f"its {level}", paper, (f"{level} {bounds}",),
                    f"the OUTLETS drafter trained {_epochs_text(epochs)} on the train split (one seed); {requests}, "
                    f"{seeds} seeds")


def tour(results: StudyResults) -> list[TourStop]:
    """The five stops of a study's ``results``."""
    entropy = _entropy_stop(results.evidence())
    payload = results.claims() or {}
    claims, config = payload.get("claims", []), payload.get("config", {})
    cv = (f"{config.get('folds', '?')}-fold cross-validation grouped by conversation, {config.get('seeds', '?')} "
          "training seeds")
    epochs = drafter_epochs(results)
    drafter = f"the OUTLETS drafter trained {_epochs_text(epochs)} on the train split (one seed)"
    return [
        entropy,
        _claim_stop("2 · Pooling", "pages/4_Pooling_ablation.py", _claim(claims, "EGTP pooling < mean"),
                    "EGTP minus mean pooling, static heads", "EGTP paper: EGTP below mean pooling",
                    f"static EGTP heads (EGTP and mean pooling), {cv}"),
        _claim_stop("3 · Remaining length", "pages/3_Remaining_length.py",
                    _claim(claims, f"PLP MAE falls from step 0 to step {PLP_STEP}"),
                    "PLP MAE at step 32 minus step 0", "EGTP paper: falls (e.g. 95.2 -> 80.9 on RL)",
                    f"PLP heads, {cv}; the finished runs still generating at step {PLP_STEP}"),
        _claim_stop("4 · Drafter", "pages/5_Drafter_vs_target.py", _claim(claims, "OUTLETS drafter < target probe"),
                    "OUTLETS drafter minus target probe, steps 0-32", "OUTLETS paper: drafter below probes",
                    f"{drafter}, scored on the runs of conversations it never saw; the target probe: {cv}"),
        scheduling_stop(results.preset(), epochs),
    ]
