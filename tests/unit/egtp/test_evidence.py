"""The evidence table end to end on a planted signal (the length is carried by the highest-entropy token's
state, which also encodes its entropy), on shuffled entropies, and the verdict read from the CIs."""

import numpy as np
import pandas as pd
import pytest
import torch

from lenscope.analysis.core.soft_label_head import SoftLabelHead
from lenscope.analysis.egtp.attention_head import predict_runs, train_attention_head
from lenscope.analysis.egtp.evidence import (
    COLUMNS,
    CONTROLS,
    PARTIAL,
    RunArrays,
    head_evidence,
    head_summaries,
    positive_control,
    verdict,
)
from lenscope.analysis.egtp.training import HeadConfig, train_head

TEMPLATE = torch.tensor([2.9, 0.1, 2.8])  # a fixed system turn, two high-entropy tokens in it
STATS = {"n_boot": 200, "n_perm": 100, "ig_steps": 16}


def _runs(n: int, seed: int, d: int = 6) -> list[RunArrays]:
    g = torch.Generator().manual_seed(seed)
    runs = []
    for i in range(n):
        t = int(torch.randint(8, 16, (1,), generator=g))
        entropy = torch.cat([TEMPLATE, torch.rand(t, generator=g) * 3])
        hidden = torch.randn(len(entropy), d, generator=g)
        hidden[:, 0] = entropy
        star = len(TEMPLATE) + int(entropy[len(TEMPLATE):].argmax())
        runs.append(RunArrays(i, hidden, entropy, len(TEMPLATE), max(5.0, 60 + 25 * float(hidden[star, 1]))))
    return runs


def _content(runs: list[RunArrays]) -> list[torch.Tensor]:
    return [r.hidden[r.content_start:] for r in runs]


def _lengths(runs: list[RunArrays]) -> torch.Tensor:
    return torch.tensor([r.true_length for r in runs])


@pytest.fixture(scope="module")
def planted():
    """An attention head trained on 200 planted runs (one thread: tiny tensors, and the same floats on any
    machine), and 50 held-out runs."""
    train, test = _runs(200, 0), _runs(50, 1)
    cfg = HeadConfig(hidden=16, dropout=0.0, lr=3e-2, epochs=40, batch_size=32, seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        head = train_attention_head(_content(train), _lengths(train), config=cfg).head
    finally:
        torch.set_num_threads(threads)
    return head, test


def _shuffled(runs: list[RunArrays], seed: int) -> list[RunArrays]:
    rng = np.random.default_rng(seed)
    out = []
    for r in runs:
        c, entropy = r.content_start, r.entropy.clone()
        entropy[c:] = entropy[c:][torch.from_numpy(rng.permutation(len(entropy) - c))]
        out.append(RunArrays(r.run_id, r.hidden, entropy, c, r.true_length))
    return out


def test_the_head_learns_the_planted_length(planted):
    head, test = planted
    y = _lengths(test)
    assert (predict_runs(head, _content(test)) - y).abs().mean() < 0.7 * (y - y.mean()).abs().mean()


def test_planted_signal_is_found_beyond_the_null(planted):
    head, test = planted
    table, tokens = head_evidence(test, head, name="attention", layer=5, **STATS)
    assert [t.run_id for t in tokens] == [r.run_id for r in test]
    assert all(len(t.importance["attention"]) == len(r.entropy) - r.content_start for t, r in zip(tokens, test))
    assert list(table.columns) == list(COLUMNS)
    assert set(table["control"]) == set(CONTROLS)
    assert set(table["measure"]) == {"gradient", "grad_x_act", "integrated_gradients", "attention"}
    assert (table["n_tokens"] == sum(len(r.entropy) - r.content_start for r in test)).all()
    assert (table["n_runs"] == 50).all() and not table["by_construction"].any()
    rows = table.set_index(["measure", "control"])
    for measure in ("gradient", "attention"):
        obs, null = rows.loc[(measure, "run-normalised")], rows.loc[(measure, "permutation null")]
        assert 0 < obs.pearson_lo and null.pearson_hi < obs.pearson_lo and 0 < obs.spearman_lo
        assert abs(null.pearson) < 0.05 and null.pearson_lo < 0 < null.pearson_hi
        assert rows.loc[(measure, "per-run mean"), "pearson_lo"] > 0
    assert rows.loc[("gradient", "run-normalised"), "p_value"] == pytest.approx(1 / 101)
    assert rows.loc[("gradient", "raw"), "n_perm"] == 100
    text = verdict(table)
    assert text.startswith("attention head, gradient importance: raw r = ")
    assert "; within runs r = " in text and "p < 0.01: strong and significant, above the paper's 0.451" in text


def test_shuffled_entropies_show_no_correlation(planted):
    head, test = planted
    table = head_evidence(_shuffled(test, 5), head, name="attention", layer=5, **STATS)[0].set_index(
        ["measure", "control"])
    for measure in ("gradient", "attention"):
        obs = table.loc[(measure, "run-normalised")]
        assert obs.pearson_lo < 0 < obs.pearson_hi
    within = verdict(table.reset_index()).split("; within runs ")[1]
    assert "no correlation detectable" in within


def test_egtp_at_its_own_layer_is_kept_apart_as_true_by_construction(planted):
    _, test = planted
    torch.manual_seed(0)
    x = torch.stack([r.hidden[r.content_start:].mean(0) for r in test])
    egtp = train_head(x, _lengths(test), config=HeadConfig(hidden=8, epochs=2)).head
    table, _ = head_evidence(_shuffled(test, 6)[:10], egtp, name="egtp", layer=5, pooling="egtp", **STATS)
    assert table["by_construction"].all() and table["path"].eq("head input").all()
    assert table.set_index(["measure", "control"]).loc[("gradient", "per-run mean"), "spearman"] > 0.99
    with pytest.raises(ValueError, match="by-construction"):
        verdict(table)
    within = table.set_index(["measure", "control"]).loc[("gradient", "run-normalised")]
    assert positive_control(table).endswith(f"too few prompts to judge (n = 10) (within runs r = {within.pearson:.3f} "
                                            f"[{within.pearson_lo:.3f}, {within.pearson_hi:.3f}])")


def test_the_positive_control_shows_the_correlation_through_the_same_pipeline(planted):
    """A head that pools by entropy, trained on the same planted runs, goes through the very importances,
    controls and permutation test as the learned head: the pipeline must find its correlation."""
    head, test = planted
    torch.manual_seed(0)
    x = torch.stack([r.hidden[r.content_start:].mean(0) for r in test])
    egtp = train_head(x, _lengths(test), config=HeadConfig(hidden=8, epochs=2)).head
    learned, _ = head_evidence(test, head, name="attention", layer=5, **STATS)
    control, _ = head_evidence(test, egtp, name="egtp", layer=5, pooling="egtp", **STATS)
    table = pd.concat([learned, control], ignore_index=True)
    text = positive_control(table)
    assert text.startswith("positive control (egtp head, pools by entropy; gradient importance): within runs r = ")
    assert "p < 0.01: the pipeline finds a correlation where one is built in" in text
    assert verdict(table).startswith("attention head")  # the control never stands in for the test
    shuffled, _ = head_evidence(_shuffled(test, 7), egtp, name="egtp", layer=5, pooling="egtp", **STATS)
    assert "finds a correlation" in positive_control(shuffled)  # it follows the entropy it is given
    assert positive_control(learned) is None


def test_head_summaries_give_each_heads_mae_against_the_reference_and_its_weight_entropy(planted):
    head, test = planted
    mean = train_head(torch.stack([r.hidden[r.content_start:].mean(0) for r in test]), _lengths(test),
                      config=HeadConfig(hidden=8, epochs=2)).head
    rows = {r["head"]: r for r in head_summaries({"attention": (head, "attention", 1.0),
                                                   "mean": (mean, "mean", 1.0), "egtp": (mean, "egtp", 1.0)},
                                                  test, reference="mean", n_boot=100)}
    y = _lengths(test).numpy()
    assert rows["attention"]["mae"]["value"] == pytest.approx(
        np.abs(predict_runs(head, _content(test)).numpy() - y).mean(), rel=1e-5)
    assert rows["mean"]["vs_reference"]["value"] == 0 and rows["mean"]["weight_entropy"]["value"] == pytest.approx(1)
    assert rows["attention"]["vs_reference"]["hi"] < 0  # it learned the planted token; mean pooling cannot
    assert rows["attention"]["weight_entropy"]["value"] < rows["egtp"]["weight_entropy"]["value"] < 1
    assert all(r["n_runs"] == 50 for r in rows.values())


def test_a_mean_pooling_head_at_its_own_layer_is_not_testable(planted):
    _, test = planted
    mean = SoftLabelHead(6, train_head(torch.randn(8, 6), torch.arange(8.0) + 5, config=HeadConfig(
        hidden=8, epochs=1)).head.bins, hidden=8).eval()
    mean.fit_scaler(torch.randn(8, 6))
    table, _ = head_evidence(test[:10], mean, name="mean", layer=5, pooling="mean", **STATS)
    assert "not testable" in verdict(table)


def _table(obs: tuple, null: tuple, partial: tuple, head: str = "attention", n_runs: int = 60,
           raw: tuple = (0.1, 0.05, 0.15, 0.02), by_construction: bool = False) -> pd.DataFrame:
    rows = []
    for control, (r, lo, hi, *p) in (("raw", raw), ("run-normalised", obs), ("permutation null", null),
                                     (PARTIAL, partial)):
        rows.append({"head": head, "by_construction": by_construction, "measure": "gradient", "control": control,
                     "pearson": r, "pearson_lo": lo, "pearson_hi": hi, "p_value": p[0] if p else np.nan,
                     "n_perm": 200, "n_runs": n_runs})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("obs, partial, expected", [
    ((0.2, 0.15, 0.25, 0.02), (0.1, 0.05, 0.15), "within runs r = 0.200 [0.150, 0.250], p = 0.02: weak but "
                                                  "significant, about half of the paper's 0.451 (which is ruled out)"),
    ((0.6, 0.5, 0.7, 0.02), (0.5, 0.4, 0.6), "within runs r = 0.600 [0.500, 0.700], p = 0.02: strong and "
                                              "significant, above the paper's 0.451"),
    ((0.45, 0.3, 0.6, 0.02), (0.4, 0.3, 0.5), "moderate and significant, consistent with the paper's 0.451"),
    ((0.2, 0.15, 0.25, 0.02), (0.0, -0.05, 0.05), "; not beyond position and activation norm (partial r = 0.000"),
    ((0.03, -0.02, 0.08, 0.3), (0.0, -0.05, 0.05), "within runs r = 0.030 [-0.020, 0.080], p = 0.3: no "
                                                   "correlation detectable; the paper's 0.451 is ruled out"),
    ((-0.2, -0.25, -0.15, 0.02), (0.0, -0.05, 0.05), "a significant anti-correlation, against the paper's sign"),
])
def test_verdict_reads_the_permutation_p_value_and_the_effect_size(obs, partial, expected):
    text = verdict(_table(obs, (0.0, -0.05, 0.05), partial))
    assert text.startswith("attention head, gradient importance: raw r = 0.100 [0.050, 0.150], p = 0.02: weak "
                           "but significant, about a fifth of the paper's 0.451 (which is ruled out); within runs ")
    assert expected in text
    assert ("not beyond" in text) == (partial[1] <= 0 <= partial[2] and obs[3] < 0.05)


def test_the_issues_example_reads_as_weak_but_significant_a_tenth_of_the_papers():
    text = verdict(_table((0.033, 0.005, 0.069, 1 / 201), (0.0, -0.05, 0.05), (0.03, 0.001, 0.06)))
    assert text.endswith("within runs r = 0.033 [0.005, 0.069], p < 0.005: weak but significant, about a tenth of "
                         "the paper's 0.451 (which is ruled out)")


def test_under_fifty_test_prompts_the_verdict_says_too_few_and_still_shows_the_interval():
    text = verdict(_table((0.523, 0.3, 0.7), (0.0, -0.05, 0.05), (0.5, 0.3, 0.7), n_runs=14))
    assert text == ("attention head, gradient importance: too few prompts to judge (n = 14) "
                    "(raw r = 0.100 [0.050, 0.150], within runs r = 0.523 [0.300, 0.700]; the paper reports 0.451)")
    assert "too few" not in verdict(_table((0.523, 0.3, 0.7, 0.02), (0.0, -0.05, 0.05), (0.5, 0.3, 0.7), n_runs=50))


def test_a_positive_control_the_pipeline_misses_says_nothing_can_be_read():
    table = _table((0.02, -0.03, 0.07, 0.4), (0.0, -0.05, 0.05), (0.0, -0.05, 0.05), head="egtp",
                   by_construction=True)
    assert positive_control(table).endswith("p = 0.4: the pipeline misses even a built-in correlation, so no "
                                            "result of a learned head can be read")
