"""The papers' claims judged on one dataset's stored predictors, each as a paired MAE difference with its 95%
bootstrap CI over test prompts. A claim is *reproduced* when the whole CI lies on the claimed side of 0,
*contradicted* when it lies on the other side, and *not reproduced (inconclusive)* otherwise."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from analysis.core.metrics import ci_text, difference_verdict, paired_mae_difference
from cache.store import Store
from lenscope.jobs.egtp import PAPER_ABLATION, PAPER_PLP, PLP_KIND, STATIC_KIND, predictor_name
from lenscope.jobs.results import compare_predictors

PROXY_BASELINES = ("ssjf-reg", "ssjf-mc", "s3")
PLP_STEP = 32


@dataclass(frozen=True)
class Claim:
    """One claim: what it says, the paper's number, ours with its CI (negative difference: the claim holds)."""

    claim: str
    paper: str
    difference: float | None
    lo: float | None
    hi: float | None
    runs: int
    verdict: str


# Fewer paired test runs than this give a bootstrap CI too ragged to judge a claim by.
MIN_RUNS = 10


def verdict(lo: float | None, hi: float | None, runs: int = MIN_RUNS) -> str:
    if lo is None:
        return "not measured (train the predictors first)"
    if runs < MIN_RUNS:
        return f"not judged (only {runs} test runs; at least {MIN_RUNS} needed)"
    return difference_verdict(lo, hi, "reproduced", "contradicted", "not reproduced (inconclusive)")


def _claim(text: str, paper: str, diff: dict | None) -> Claim:
    if diff is None:
        return Claim(text, paper, None, None, None, 0, verdict(None, None))
    return Claim(text, paper, diff["difference"], diff["lo"], diff["hi"], diff["runs"],
                 verdict(diff["lo"], diff["hi"], diff["runs"]))


def dataset_predictors(store: Store, dataset: str) -> dict[str, int]:
    """Name -> id of every predictor trained on ``dataset``."""
    predictors = store.predictors_frame()
    own = predictors[predictors["dataset_id"] == store.dataset_id(dataset)]
    return {name: int(pid) for name, pid in zip(own["name"], own["predictor_id"])}


def _pair(store: Store, ids: dict, first: str, second: str, steps: str = "0") -> dict | None:
    if first not in ids or second not in ids:
        return None
    found = [c for c in compare_predictors(store, ids[first], ids[second]) if c["steps"] == steps]
    return found[0] if found else None


def _plp_decrease(store: Store, ids: dict, name: str) -> dict | None:
    """MAE at step 32 minus MAE at step 0 of the PLP head, paired over the test runs alive at step 32."""
    if name not in ids:
        return None
    frame = store.predictions_frame(ids[name])
    test = frame[frame["split"] == "test"]
    at0, at32 = (test[test["step"] == s].set_index("run_id") for s in (0, PLP_STEP))
    runs = at0.index.intersection(at32.index)
    if runs.empty:
        return None
    err32 = (at32.loc[runs, "predicted"] - at32.loc[runs, "true"]).abs().to_numpy()
    err0 = (at0.loc[runs, "predicted"] - at0.loc[runs, "true"]).abs().to_numpy()
    diff = paired_mae_difference(err32, err0, np.zeros(len(runs)))
    return {"difference": diff.value, "lo": diff.lo, "hi": diff.hi, "runs": len(runs)}


def _vs_constant(store: Store, dataset: str) -> list[Claim]:
    predictors = store.predictors_frame()
    own = predictors[predictors["dataset_id"] == store.dataset_id(dataset)]
    out = []
    for row in own.itertuples():
        m = row.metrics or {}
        key = "dynamic" if "dynamic_vs_constant" in m else "static"
        if f"{key}_vs_constant" not in m:
            continue
        out.append(_claim(f"{row.name} ({key}) < constant", "implied by both papers",
                          {"difference": m[f"{key}_vs_constant"], "lo": m[f"{key}_vs_constant_lo"],
                           "hi": m[f"{key}_vs_constant_hi"], "runs": m.get("n_runs", 0)}))
    return out


def claims_table(store: Store, dataset: str, layer: int = 30, probe_layer: int = 15) -> pd.DataFrame:
    """Every claim of the study (EGTP pooling, learned predictors vs the constant, PLP, drafter vs probe,
    EGTP vs proxy-encoder baselines) on ``dataset``; unmeasured claims say which predictors are missing."""
    ids = dataset_predictors(store, dataset)
    paper = PAPER_ABLATION.set_index("pooling")["mean_mae"]
    egtp = predictor_name(STATIC_KIND, dataset, layer, "egtp")
    claims = [_claim(f"EGTP pooling < {other} pooling (static, layer {layer})",
                     f"{paper['egtp']:.1f} vs {paper[other]:.1f} (ForeLen mean)",
                     _pair(store, ids, egtp, predictor_name(STATIC_KIND, dataset, layer, other)))
              for other in ("max", "last", "mean")]
    claims += _vs_constant(store, dataset)
    claims.append(_claim(f"PLP MAE falls from step 0 to step {PLP_STEP}",
                         "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in PAPER_PLP.items()),
                         _plp_decrease(store, ids, predictor_name(PLP_KIND, dataset, layer))))
    claims.append(_claim("drafter dynamic < target-probe dynamic (steps 0-32)",
                         "OUTLETS: drafter below MLP probes (all settings)",
                         _pair(store, ids, f"drafter:{dataset}:outlets",
                               f"probe:{dataset}:L{probe_layer}:regression", f"0-{PLP_STEP}")))
    claims += [_claim(f"EGTP < {b} (static)", "EGTP: below the proxy-encoder baselines",
                      _pair(store, ids, egtp, f"{b}:{dataset}")) for b in PROXY_BASELINES]
    return pd.DataFrame([asdict(c) for c in claims])


def claims_markdown(table: pd.DataFrame) -> str:
    """The claims as a markdown table (differences in tokens of MAE; negative: the claim holds)."""
    lines = ["| claim | paper | ours: MAE difference [95% CI] | runs | verdict |", "|---|---|---|---|---|"]
    for c in table.itertuples():
        measured = c.difference is not None and not pd.isna(c.difference)
        ours = ci_text(c.difference, c.lo, c.hi, signed=True) if measured else ""
        lines.append(f"| {c.claim} | {c.paper} | {ours} | {c.runs} | {c.verdict} |")
    return "\n".join(lines)
