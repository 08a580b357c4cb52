"""Shipping a store's predictors (``ship_predictors``): a tiny head trained on synthetic stored runs (no model) is
copied with a manifest whose hashes ``shipped_predictor`` checks, ``shipped_fresh`` follows the store's weights, and
the copy loads to the same head as the store's."""

from __future__ import annotations

import json

import pytest
import torch

from lenscope.analysis.egtp.training import HeadConfig, load_head
from lenscope.jobs.egtp.heads import train_static
from lenscope.jobs.predictors.catalog import (
    MANIFEST,
    load_predictor_files,
    sha256,
    ship_predictors,
    shipped_fresh,
    shipped_predictor,
    store_predictor,
)
from lenscope.jobs.predictors.predict import interval_metrics
from lenscope.jobs.scheduler.replay import training_median
from tests.egtp_data import synthetic_dataset


@pytest.fixture
def trained(store):
    synthetic_dataset(store, "syn", n=40)
    train_static(store, "syn", poolings=("egtp",), config=HeadConfig(epochs=3, hidden=16))
    return store


def test_shipped_predictors_round_trip_and_go_stale_with_the_store(trained, tmp_path):
    store, root = trained, tmp_path / "predictors"
    with pytest.raises(ValueError, match=r"no 'mean' predictor trained on dataset 'syn' \(looked for 'egtp_static-m"):
        store_predictor(store, "mean", "syn")
    local = store_predictor(store, "egtp", "syn")
    assert local.source == "store dataset 'syn'" and local.model == "synthetic" and local.path.is_file()
    assert load_predictor_files("egtp", store, "syn") == local
    assert not shipped_fresh(store, "syn", root)  # nothing shipped yet

    assert ship_predictors(store, "syn", root, interval_metrics(store, "syn")) == ["egtp", "constant"]
    assert shipped_fresh(store, "syn", root)
    egtp, constant = shipped_predictor("egtp", root), shipped_predictor("constant", root)
    m = egtp.manifest
    assert (m["source"], m["model"], m["kind"]) == ("shipped", "synthetic", "egtp_static")
    assert m["store_name"] == "egtp_static-egtp-syn-L30"
    assert m["source_sha256"] == m["files"]["model.safetensors"] == sha256(local.path)
    assert m["training_data"]["dataset"] == "syn" and m["training_data"]["runs"] == 40
    assert 0 <= m["metrics"]["interval_coverage"] <= 1 and m["metrics"]["interval_runs"] > 0
    assert "best_epoch" in m["metrics"]  # the store's metrics are kept beside the measured interval
    assert constant.manifest["files"] == {} and [f.name for f in constant.path.iterdir()] == [MANIFEST]
    assert constant.manifest["config"]["median"] == training_median(store, "syn")
    shipped_head, meta = load_head(egtp.path / "model.safetensors")
    store_head, _ = load_head(local.path)
    assert meta["layer"] == 30 and meta["pooling"] == "egtp"
    for key, value in store_head.state_dict().items():
        assert torch.equal(shipped_head.state_dict()[key], value), key

    train_static(store, "syn", poolings=("egtp",), config=HeadConfig(epochs=2, hidden=8))  # new weights
    assert not shipped_fresh(store, "syn", root)
    (root / "egtp" / "left-over.bin").write_bytes(b"old")
    assert ship_predictors(store, "syn", root) == ["egtp", "constant"]
    assert shipped_fresh(store, "syn", root) and not (root / "egtp" / "left-over.bin").exists()
    assert json.loads((root / "egtp" / MANIFEST).read_text())["config"]["head"]["hidden"] == 8

    train_static(store, "syn", poolings=("mean",), config=HeadConfig(epochs=2, hidden=8))  # trained, not shipped
    assert not shipped_fresh(store, "syn", root)
