"""The drafter ablation: probe features that see what the drafter sees, validated probes, and the drafter
variants paired with them (registered stand-in drafters on synthetic stored runs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lenscope.analysis.drafter.probes import ProbeConfig, step_features, train_probe
from lenscope.cli import main
from lenscope.jobs.drafter import ablation as job
from lenscope.jobs.drafter.training import probe_name
from tests.egtp_data import SYNTHETIC_LAYER, fake_target, synthetic_dataset
from tests.unit.drafter.test_probes import synthetic

FUSED = [2, 15, 27]


def test_step_features_give_the_last_state_and_the_mean_over_the_prefix():
    a, b = torch.randn(9, 3), torch.randn(9, 3)
    last = step_features([a, b], np.array([2, 5]))
    assert torch.equal(last, torch.cat([a[[2, 5]], b[[2, 5]]], 1))
    pooled = step_features([a, b], np.array([2, 5]), "pooled")
    assert pooled.shape == (2, 12) and torch.equal(pooled[:, :6], last)
    assert torch.allclose(pooled[1, 6:9], a[:6].mean(0)) and torch.allclose(pooled[0, 9:], b[:3].mean(0))
    with pytest.raises(ValueError, match="view must be one of"):
        step_features([a], np.array([1]), "max")


def test_a_validated_probe_keeps_its_best_epoch():
    x, rem = synthetic(600, seed=0)
    val = synthetic(200, seed=1)
    probe = train_probe(x, rem, ProbeConfig(in_dim=16, layer=7), epochs=6, lr=3e-3, val=val)
    scores = [h["val"] for h in probe.history]
    assert len(scores) == 6 and probe.best_epoch == 1 + int(np.argmin(scores))
    assert float((probe.predict(val[0]) - val[1]).abs().mean()) == pytest.approx(min(scores), rel=1e-5)
    assert train_probe(x, rem, ProbeConfig(in_dim=16, layer=7), epochs=3).best_epoch == 3  # no val: the last


def _register_drafter(store, variant: str, noise: float, seed: int) -> None:
    """A stand-in drafter: the true remaining length times noise, at steps 0-40 of every run."""
    runs = store.runs_frame("syn").set_index("run_id")
    from lenscope.jobs.runs.datasets import dataset_runs
    splits = dataset_runs(store, "syn").set_index("run_id")["split"]
    rng = np.random.default_rng(seed)
    frames = []
    for run_id, row in runs.iterrows():
        steps = np.arange(min(41, int(row["output_tokens"])))
        true = row["output_tokens"] - steps
        frames.append(pd.DataFrame({"run_id": run_id, "step": steps, "true": true, "split": splits[run_id],
                                    "predicted": true * rng.lognormal(0, noise, len(steps))}))
    pid = store.save_predictor(f"drafter:syn:{variant}", "drafter", {"dataset": "syn", "variant": variant,
                                                                      "fuse_layers": FUSED}, {}, "",
                               store.ensure_model(fake_target(8)), store.dataset_id("syn"))
    store.save_predictions(pid, pd.concat(frames, ignore_index=True))


@pytest.fixture
def ablation_store(store):
    synthetic_dataset(store, "syn", n=80, other_layers=tuple(FUSED))
    return store


def test_the_ablation_pairs_every_variant_with_probes_that_see_what_the_drafter_sees(ablation_store, monkeypatch,
                                                                                      capsys):
    store = ablation_store
    with pytest.raises(ValueError, match="no OUTLETS drafter trained"):
        job.drafter_ablation(store, "syn", SYNTHETIC_LAYER, epochs=2)
    for variant, noise in (("outlets", 0.05), ("no-decoder", 0.6), ("lp-only", 0.3)):
        _register_drafter(store, variant, noise, seed=len(variant))
    payload = job.drafter_ablation(store, "syn", SYNTHETIC_LAYER, epochs=2)

    assert set(payload["candidates"]) == {"2", "15", "27", "30"} and payload["fuse_layers"] == FUSED
    assert payload["candidates"][str(payload["best_layer"])] == min(payload["candidates"].values())
    probes = {job.BEST_LAYER, job.FUSED_LAST, job.FUSED_POOLED, job.LAST_POOLED}
    assert set(payload["predictors"]) == probes | {"outlets drafter", "no-decoder drafter", "lp-only drafter"}
    assert payload["names"][job.FUSED_POOLED] == probe_name("syn", FUSED, "regression", "pooled")
    registered = store.predictors_frame("probe").set_index("name")
    config = registered.loc[payload["names"][job.FUSED_POOLED], "config"]
    assert (config["layers"], config["view"], config["train_steps"]) == (FUSED, "pooled", {"dense": 32, "later": 64})
    assert registered.loc[payload["names"][job.BEST_LAYER], "metrics"]["best_epoch"] in (1, 2)
    for m in payload["predictors"].values():
        assert m["lo"] <= m["value"] <= m["hi"] and m["runs"] > 0

    pairs = {(p["first"], p["second"]): p for p in payload["pairs"]}
    assert {("outlets drafter", label) for label in probes} <= set(pairs)
    decoder = pairs[("no-decoder drafter", "outlets drafter")]
    assert decoder["share"] == "the draft decoder" and decoder["difference"] > 0  # the stand-in decoder helps
    assert decoder["verdict"] in ("the draft decoder earns tokens", "not distinguishable") or \
        decoder["verdict"].startswith("too few prompts")
    assert pairs[("lp-only drafter", "outlets drafter")]["share"] == "the draft (KL) objective"
    assert {p["share"] for p in payload["pairs"]} >= {"the drafter's inputs, to a probe",
                                                       "the drafter's training beyond a probe on its inputs"}

    monkeypatch.setattr(job, "train_probe_job", lambda *a, **k: pytest.fail("retrained a registered probe"))
    assert job.drafter_ablation(store, "syn", SYNTHETIC_LAYER, epochs=2) == payload  # kept, nothing recomputed
    assert main(["drafter-ablation", "--dataset", "syn", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "best single layer on validation: L" in out and "the draft decoder" in out and "MAE, steps 0-32" in out
