"""The claims table: each claim a paired difference with its CI and a verdict, or a note that it is not measured."""

from __future__ import annotations

import pytest

from analysis.egtp.training import HeadConfig
from lenscope.cli import main
from lenscope.jobs.claims import claims_markdown, claims_table, verdict
from lenscope.jobs.egtp import train_plp, train_static
from tests.egtp_data import SYNTHETIC_LAYER, synthetic_dataset


@pytest.mark.parametrize("lo, hi, expected", [(-3.0, -1.0, "reproduced"), (1.0, 4.0, "contradicted"),
                                              (-2.0, 2.0, "not reproduced (inconclusive)")])
def test_verdict_follows_the_ci(lo, hi, expected):
    assert verdict(lo, hi) == expected


def test_claims_on_a_synthetic_dataset(store, capsys):
    synthetic_dataset(store, "syn", n=120)
    cfg = HeadConfig(epochs=30, hidden=16)
    train_static(store, "syn", layer=SYNTHETIC_LAYER, config=cfg)
    train_plp(store, "syn", SYNTHETIC_LAYER, config=HeadConfig(epochs=3, batch_size=64, hidden=16))
    table = claims_table(store, "syn", layer=SYNTHETIC_LAYER).set_index("claim")
    names = [f"EGTP pooling < {p} pooling (static, layer {SYNTHETIC_LAYER})" for p in ("max", "last", "mean")]
    pooling = table.loc[names]
    assert (pooling["runs"] > 0).all() and (pooling["lo"] <= pooling["difference"]).all()
    assert (pooling["difference"] <= pooling["hi"]).all()
    assert not pooling["verdict"].str.startswith("not measured").any()
    vs_constant = table[table.index.str.endswith("< constant")]
    assert len(vs_constant) == 5  # four static heads and the PLP head
    # the synthetic length signal sits in the top-entropy token: the EGTP head must beat the constant
    assert vs_constant.loc["egtp_static-egtp-syn-L30 (static) < constant", "verdict"] == "reproduced"
    assert table.loc["drafter dynamic < target-probe dynamic (steps 0-32)", "verdict"].startswith("not measured")
    assert main(["claims", "--dataset", "syn", "--layer", str(SYNTHETIC_LAYER)]) == 0
    out = capsys.readouterr().out
    assert "| claim | paper |" in out and "censored" in out
    assert claims_markdown(claims_table(store, "syn", layer=SYNTHETIC_LAYER)).count("\n") == len(table) + 1
