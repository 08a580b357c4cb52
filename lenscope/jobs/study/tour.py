"""The guided tour: five steps of the story (entropy -> pooling -> remaining length -> drafter -> scheduling),
each with the one number that matters, read from a study's results (the store's or the shipped ones; nothing is
computed here)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from lenscope.analysis.core.metrics import ci_text
from lenscope.analysis.papers import EGTP_ATTRIBUTION_R, OUTLETS_SERVING
from lenscope.jobs.egtp.attribution import evidence_row
from lenscope.jobs.results.claims import PLP_STEP
from lenscope.jobs.scheduler.replay import ORACLE, preset_seed_table
from lenscope.jobs.study.results import StudyResults


@dataclass(frozen=True)
class TourStop:
    """One card: its title, the page it links to, the number (None until its step ran), what the number
    means, and the paper's counterpart."""

    title: str
    page: str
    value: str | None
    detail: str
    paper: str

    @property
    def number(self) -> str:
        """The card's headline: the number alone (``0.387``, ``-11.3``, ``+4.1%``), or a dash until it is measured."""
        return "—" if self.value is None else self.value.partition(" [")[0]

    @property
    def interval(self) -> str:
        """The number's interval as the card's second line (``95% CI [0.352, 0.421]``), empty without one."""
        _, bracket, rest = (self.value or "").partition(" [")
        return f"95% CI [{rest}" if bracket else ""


def _claim(claims: list[dict], starts: str) -> dict | None:
    return next((c for c in claims if c["claim"].startswith(starts) and pd.notna(c["difference"])), None)


def _claim_stop(title: str, page: str, claim: dict | None, what: str, paper: str) -> TourStop:
    if claim is None:
        return TourStop(title, page, None, f"{what}: not measured yet", paper)
    return TourStop(title, page, ci_text(claim["difference"], claim["lo"], claim["hi"], signed=True),
                    f"{what} (tokens of MAE, out of fold, Holm-adjusted CI, {claim.get('prompts', 0)} prompts, "
                    f"{claim['runs']} runs): {claim['verdict']}", paper)


def _entropy_stop(found: tuple[dict, dict] | None) -> TourStop:
    """The fair test: the learned attention head's raw r (like for like with the paper's), its verdict (the
    permutation p-value, the effect size, under 50 prompts too few to judge) and the positive control."""
    title, page, paper = "1 · Entropy", "pages/2_Attribution.py", f"EGTP paper: r = {EGTP_ATTRIBUTION_R}"
    row = None if found is None else evidence_row(found[1])
    if row is None:
        return TourStop(title, page, None, "entropy vs gradient importance of a learned attention-pooling head: not "
                        "measured yet (the study's attribution-evidence step)", paper)
    payload = found[1]
    return TourStop(title, page, ci_text(row["pearson"], row["pearson_lo"], row["pearson_hi"], digits=3),
                    f"raw Pearson r of token entropy with gradient importance I_t = ||dL_MSE/dh_t|| of a learned "
                    f"attention-pooling head, no entropy in its path ({row['n_tokens']} tokens of {row['n_runs']} "
                    f"test prompts). {payload['verdict']}. {payload['positive_control']}.", paper)


def scheduling_stop(preset: dict | None) -> TourStop:
    """The drafter's LB+SJF short-request P99 change over the preset's seeds, between the constant's (the floor)
    and the oracle's (the ceiling) on the same workload."""
    title, page = "5 · Scheduling", "pages/6_Scheduler_playground.py"
    paper = f"OUTLETS paper: {OUTLETS_SERVING['short_p99_change']:+.1%}"
    if preset is None or "workloads" not in preset:
        return TourStop(title, page, None, "short-request P99 latency, LB+SJF vs RR+FCFS: not measured yet (the "
                        "study's scheduler-preset step)", paper)
    table = preset_seed_table(pd.DataFrame(preset["workloads"]["uniform"]["per_seed"]))
    rows = table[table["policy"] == "LB+SJF"].set_index("predictor")

    def change(name: str) -> str:
        r = rows.loc[name]
        return f"{r.short_p99_change:+.1%} [{r.short_p99_change_lo:+.1%}, {r.short_p99_change_hi:+.1%}]"

    drafter, oracle = preset["predictor"], ORACLE.label()
    constant = next(n for n in rows.index if n not in (drafter, oracle))
    return TourStop(title, page, change(drafter),
                    f"short-request P99 latency, LB+SJF vs RR+FCFS, 1 prefill + 3 decode, the OUTLETS drafter's "
                    f"out-of-sample predictions ({preset['test_runs']} test runs, {int(rows.loc[drafter, 'seeds'])} "
                    f"seeds, 95% t interval); on the same requests the oracle gives {change(oracle)} (the ceiling) "
                    f"and a constant of {preset['constant']:.0f} tokens {change(constant)} (the floor)", paper)


def tour(results: StudyResults) -> list[TourStop]:
    """The five stops of a study's ``results``."""
    entropy = _entropy_stop(results.evidence())
    claims = (results.claims() or {}).get("claims", [])
    scheduling = scheduling_stop(results.preset())
    return [
        entropy,
        _claim_stop("2 · Pooling", "pages/4_Pooling_ablation.py", _claim(claims, "EGTP pooling < mean"),
                    "EGTP minus mean pooling, static heads", "EGTP paper: EGTP below mean pooling"),
        _claim_stop("3 · Remaining length", "pages/3_Remaining_length.py",
                    _claim(claims, f"PLP MAE falls from step 0 to step {PLP_STEP}"),
                    "PLP MAE at step 32 minus step 0", "EGTP paper: falls (e.g. 95.2 -> 80.9 on RL)"),
        _claim_stop("4 · Drafter", "pages/5_Drafter_vs_target.py", _claim(claims, "OUTLETS drafter < target probe"),
                    "OUTLETS drafter minus target probe, steps 0-32", "OUTLETS paper: drafter below probes"),
        scheduling,
    ]
