"""Verdict labels that say the size: baseline checks, the Holm family named beside each interval, stored and shipped
claims relabelled from their numbers alone, and the shipped claims carrying exactly the code's verdicts."""

from __future__ import annotations

import copy
import json

import pandas as pd

from lenscope.analysis.core.verdicts import (
    BASELINE_CHECK,
    CHECK_FAILED,
    CHECK_PASSED,
    CONTRADICTED,
    REPRODUCED,
    SIZE_RULED_OUT,
    interval_label,
)
from lenscope.jobs.results.claims import (
    CLAIMS_KIND,
    claim_specs,
    claims_display,
    claims_markdown,
    relabel_rows,
    relabelled,
    row_verdict,
    stored_claims,
)
from lenscope.jobs.results.cv_learners import CONSTANT, static_name
from lenscope.jobs.study.shipped import RESULTS_DIR, shipped_study

NUMBERS = ("difference", "lo", "hi", "lo95", "hi95", "level", "p_value", "paper_effect", "prompts", "runs")


def _row(claim: str, first: str, second: str, lo: float | None, hi: float | None, level: float | None,
         paper_effect: float | None = None, prompts: int = 200, paper: str = "implied by both papers",
         verdict: str = "reproduced") -> dict:
    measured = lo is not None
    return {"claim": claim, "paper": paper, "first": first, "second": second, "paper_effect": paper_effect,
            "difference": (lo + hi) / 2 if measured else None, "lo": lo, "hi": hi, "lo95": lo, "hi95": hi,
            "level": level, "p_value": 0.01, "runs": prompts, "prompts": prompts, "clipped_difference": None,
            "clipped_lo": None, "clipped_hi": None, "clipped_runs": 0,
            "verdict": verdict if measured else "not measured (no runs in common)"}


def _old_table() -> list[dict]:
    """A table as an older version stored it: baselines 'implied by both papers', sizes not weighed, no family."""
    return [
        _row("baseline s3 < median constant (static)", "baseline s3", CONSTANT, 1.3, 20.7, 0.9975,
             verdict="contradicted"),
        _row("baseline trail < median constant (static)", "baseline trail", CONSTANT, -20.0, -1.0, 0.99),
        _row("EGTP head < ssjf-reg (static)", static_name("egtp"), "baseline ssjf-reg", -13.7, -0.5, 0.9938,
             paper_effect=-89.8, paper="EGTP: -55.1%"),
        _row("PLP < median constant (dynamic, steps 0-32)", "PLP", CONSTANT, -7.7, -1.0, 0.9929),
        _row("OUTLETS drafter < target probe (dynamic, steps 0-32)", "OUTLETS drafter", "target probe (layer 15)",
             0.7, 14.9, None, prompts=26, paper="OUTLETS: drafter below MLP probes"),
        _row("baseline ltr < median constant (static)", "baseline ltr", CONSTANT, None, None, None),
    ]


def test_claim_specs_mark_the_baselines_against_the_constant_as_baseline_checks():
    names = [CONSTANT, static_name("egtp"), "PLP", "baseline s3", "baseline pia", "OUTLETS drafter"]
    specs = {s.claim: s for s in claim_specs(names, "target probe (layer 15)")}
    checks = {c for c, s in specs.items() if s.paper == BASELINE_CHECK}
    assert checks == {"baseline s3 < median constant (static)", "baseline pia < median constant (static)"}
    assert specs[f"{static_name('egtp')} < median constant (static)"].paper == "implied by both papers"
    assert specs["PLP < median constant (dynamic, steps 0-32)"].paper == "implied by both papers"
    assert specs["EGTP head < s3 (static)"].paper.startswith("EGTP:")  # the paper's claim against S3 stays one


def test_an_old_table_is_relabelled_from_its_numbers_alone():
    old = _old_table()
    new = relabel_rows(copy.deepcopy(old))
    verdicts = [r["verdict"] for r in new]
    assert verdicts == [CHECK_FAILED, CHECK_PASSED, SIZE_RULED_OUT, REPRODUCED, "too few prompts to judge (n = 26)",
                        "not measured (no runs in common)"]
    assert [r["paper"] for r in new][:3] == [BASELINE_CHECK, BASELINE_CHECK, "EGTP: -55.1%"]
    assert new[5]["paper"] == BASELINE_CHECK
    assert [r["family"] for r in new] == [4, 4, 4, 4, None, None]  # the rows with a Holm level
    for before, after in zip(old, new):
        assert {k: after[k] for k in NUMBERS} == {k: before[k] for k in NUMBERS}  # no number changes
    assert relabel_rows(new) == new  # relabelling is idempotent
    assert CONTRADICTED not in verdicts and all(row_verdict(r) == r["verdict"] for r in new[:5])


def test_a_stored_payload_of_an_older_version_reads_back_with_the_new_labels(store):
    old = {"claims": _old_table(), "by_scenario": {"chat": _old_table()[:3]}, "config": {"folds": 5, "seeds": 3}}
    store.memo(CLAIMS_KIND, {"dataset": "old"}, lambda: old, name="claims old")
    payload = stored_claims(store, "old")
    assert payload["claims"][2]["verdict"] == SIZE_RULED_OUT and payload["claims"][0]["paper"] == BASELINE_CHECK
    assert payload["by_scenario"]["chat"][0]["verdict"] == CHECK_FAILED
    assert [r["family"] for r in payload["by_scenario"]["chat"]] == [3, 3, 3]  # each table is its own family
    assert payload["config"] == old["config"]


def test_every_interval_of_the_claims_table_names_its_level():
    table = pd.DataFrame(relabel_rows(_old_table()))
    shown = claims_display(table)
    assert "95% CI" in shown.columns and "Holm-adjusted CI (level, family of 4)" in shown.columns
    assert shown["Holm-adjusted CI (level, family of 4)"].tolist()[:4] == [
        "[+1.3, +20.7] (99.8%)", "[-20.0, -1.0] (99%)", "[-13.7, -0.5] (99.4%)", "[-7.7, -1.0] (99.3%)"]
    assert shown["Holm-adjusted CI (level, family of 4)"].iloc[4] == ""  # too few prompts: outside the family
    assert shown["95% CI"].iloc[4] == "[+0.7, +14.9]"
    text = claims_markdown(table)
    assert text.count("\n") == len(table) + 1
    assert "| 95% CI | Holm-adjusted CI (level, family of 4) |" in text and SIZE_RULED_OUT in text


def test_the_shipped_claims_carry_the_codes_verdicts_from_their_stored_numbers():
    raw = json.loads((RESULTS_DIR / "claims.json").read_text())  # the file as shipped, not relabelled on reading
    tables = {"all": raw["claims"], **raw["by_scenario"]}
    assert relabelled(raw) == raw  # the shipped file already carries this version's labels
    seen = set()
    for scope, rows in tables.items():
        family = sum(r["level"] is not None for r in rows)
        for r in rows:
            if r["difference"] is None:
                continue
            assert r["verdict"] == row_verdict(r), (scope, r["claim"])
            assert r["family"] == (family if r["level"] is not None else None), (scope, r["claim"])
            assert (r["paper"] == BASELINE_CHECK) == r["claim"].startswith("baseline "), (scope, r["claim"])
            seen.add(r["verdict"])
    assert {SIZE_RULED_OUT, REPRODUCED, CHECK_FAILED} <= seen
    claims = {r["claim"]: r for r in raw["claims"]}
    assert claims["EGTP head < ssjf-reg (static)"]["verdict"] == SIZE_RULED_OUT
    assert claims["PLP MAE falls from step 0 to step 32"]["verdict"] == SIZE_RULED_OUT
    assert interval_label(claims["EGTP pooling < mean pooling (static)"]["level"], 24) == \
        "Holm-adjusted 99.3% CI (family of 24)"
    assert shipped_study().claims() == raw  # read back through the one relabelling function


def test_the_report_shows_the_new_labels_and_names_each_intervals_level():
    from lenscope.jobs.study.report import study_report

    html = study_report(shipped_study())
    assert "<th>95% CI</th>" in html and "<th>Holm-adjusted CI (level, family of 24)</th>" in html
    assert f"<td>{SIZE_RULED_OUT}</td>" in html and f"<td>{CHECK_FAILED}</td>" in html
    assert "[-9.1, +5.4] (99.3%)" in html and "Differences are paired bootstrap 95% CIs" not in html
