"""The attribution evidence job on a stored dataset whose answer length is carried by the prompt's
highest-entropy token: three heads, the by-construction flag, a planted signal found, the result kept, the CLI."""

from __future__ import annotations

import pandas as pd
import pytest

from lenscope.analysis.egtp.training import HeadConfig
from lenscope.cli import main
from lenscope.jobs.egtp import attribution as job
from lenscope.jobs.egtp.heads import train_static
from tests.egtp_data import SYNTHETIC_LAYER, synthetic_dataset


@pytest.fixture
def planted(store):
    synthetic_dataset(store, "syn", n=60)
    train_static(store, "syn", config=HeadConfig(epochs=20, hidden=16))
    return store


def test_the_learned_attention_head_finds_the_planted_entropy_signal_and_the_result_is_kept(planted, monkeypatch):
    payload = job.attribution_evidence(planted, "syn", SYNTHETIC_LAYER, epochs=80, n_boot=100, n_perm=30)
    table = pd.DataFrame(payload["table"])
    assert set(table["head"]) == {"attention pooling (learned)", "attention pooling (learned, MLP scorer)",
                                  "mean pooling", "egtp pooling"}
    assert set(table.loc[table["by_construction"], "head"]) == {"egtp pooling"}
    assert (table["layer"] == SYNTHETIC_LAYER).all() and payload["runs"]["test"] == table["n_runs"].max()
    rows = table[(table["head"] == "attention pooling (learned)") & (table["measure"] == "attention")]
    test = rows.set_index("control").loc["run-normalised"]
    assert test.pearson_lo > 0  # the head attends to the high-entropy token that carries the length
    assert payload["verdict"] == payload["verdicts"]["attention pooling (learned)"]
    assert "the paper reports 0.451" in payload["verdict"] and payload["paper_pearson"] == 0.451
    assert payload["positive_control"].startswith("positive control (egtp pooling head, pools by entropy")
    heads = {h["head"]: h for h in payload["heads"]}
    assert set(heads) == set(table["head"]) and heads["mean pooling"]["vs_reference"]["value"] == 0
    assert heads["attention pooling (learned)"]["weight_entropy"]["value"] < 1
    assert set(payload["best_epochs"]) == {"attention pooling (learned)", "attention pooling (learned, MLP scorer)"}
    records = payload["test_tokens"]
    assert len(records) == payload["runs"]["test"]
    n_tokens = sum(len(r["entropy"]) for r in records)
    assert (table.loc[table["control"] == "raw", "n_tokens"] == n_tokens).all()
    for record in records:
        assert len(record["tokens"]) == len(record["entropy"]) and set(record["importance"]) == set(table["head"])
        attention = record["importance"]["attention pooling (learned)"]
        assert set(attention) == {"gradient", "grad_x_act", "integrated_gradients", "attention"}
        assert all(len(v) == len(record["entropy"]) for v in attention.values())
        assert sum(attention["attention"]) == pytest.approx(1, abs=1e-3)  # softmax weights over the pooled tokens

    settings, stored = job.stored_evidence(planted, "syn", SYNTHETIC_LAYER)
    assert stored == payload
    assert (settings["epochs"], settings["n_perm"], settings["include_censored"]) == (80, 30, False)
    assert job.stored_evidence(planted, "syn", SYNTHETIC_LAYER + 1) is None
    monkeypatch.setattr(job, "train_attention_head", lambda *a, **k: pytest.fail("recomputed a stored result"))
    assert job.attribution_evidence(planted, "syn", SYNTHETIC_LAYER, epochs=80, n_boot=100, n_perm=30) == payload
    train_static(planted, "syn", config=HeadConfig(epochs=2, hidden=16))  # retrained heads: the evidence is stale
    assert job.stored_evidence(planted, "syn", SYNTHETIC_LAYER) is None


def test_static_heads_must_be_trained_first(store):
    synthetic_dataset(store, "syn", n=20)
    with pytest.raises(ValueError, match="train-egtp"):
        job.attribution_evidence(store, "syn", SYNTHETIC_LAYER)


def test_cli_prints_the_table_the_paper_value_and_the_verdict(planted, capsys):
    assert main(["attribution", "--dataset", "syn", "--layer", str(SYNTHETIC_LAYER), "--evidence", "--epochs", "5",
                 "--bootstrap", "50", "--permutations", "20"]) == 0
    out = capsys.readouterr().out
    assert "attention pooling (learned)" in out and "permutation null" in out and "Pearson r [95% CI]" in out
    assert "positive control: pools by entropy" in out and "permutation p" in out and "test MAE" in out
    assert "paper: Pearson r = 0.451" in out and "verdict: attention pooling (learned) head" in out
    assert "verdict: attention pooling (learned, MLP scorer) head" in out and "positive control (egtp" in out
