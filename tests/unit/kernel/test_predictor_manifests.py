"""A predictor loads only with a list of every file its loader reads, each with its SHA-256: a shipped predictor's
manifest, a stored one's row (recorded when it was trained). A file unlisted, missing or different, an unlisted
weight or config file in its folder, or a manifest that is not one, is refused naming the file; shipping writes
every file whole, so a failed ship leaves the previous predictor loadable. No model is loaded."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from lenscope.analysis.drafter.probes import LengthProbe, ProbeConfig
from lenscope.analysis.egtp.training import HeadConfig
from lenscope.jobs.drafter.training import probe_name
from lenscope.jobs.egtp.heads import train_static
from lenscope.jobs.predictors.catalog import (
    MANIFEST,
    SHIPPED_DIR,
    load_predictor_files,
    ship_predictors,
    shipped_names,
    shipped_predictor,
    shipped_summary,
    store_predictor,
)
from lenscope.jobs.predictors.predict import write_predictions
from lenscope.store.settings import get_settings
from tests.egtp_data import synthetic_dataset


@pytest.fixture
def root(tmp_path):
    """Copies of the shipped egtp head and constant in their own predictors folder."""
    for name in ("egtp", "constant"):
        shutil.copytree(SHIPPED_DIR / name, tmp_path / name)
    return tmp_path


def _edit(root, name: str, **changes) -> None:
    path = root / name / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _flip_last_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_manifest_that_lists_no_files_does_not_load_tampered_weights(root):
    _flip_last_byte(root / "egtp" / "model.safetensors")
    _edit(root, "egtp", files={})
    with pytest.raises(ValueError) as info:
        shipped_predictor("egtp", root)
    assert f"{root / 'egtp' / MANIFEST} does not list model.safetensors, which shipped predictor 'egtp' loads" in (
        str(info.value))
    assert "`git checkout data/predictors`" in str(info.value)


def test_a_weight_file_the_manifest_lists_only_in_part_is_refused(root):
    manifest = json.loads((root / "egtp" / MANIFEST).read_text())
    _edit(root, "egtp", files={"model.safetensors": manifest["files"]["model.safetensors"]})
    with pytest.raises(ValueError, match=r"does not list model\.json, which shipped predictor 'egtp' loads"):
        shipped_predictor("egtp", root)


def test_an_unlisted_weight_or_config_file_in_the_folder_is_refused(root):
    (root / "egtp" / "config.json").write_text("{}")
    with pytest.raises(ValueError) as info:
        shipped_predictor("egtp", root)
    assert f"{root / 'egtp' / 'config.json'} is not listed in {root / 'egtp' / MANIFEST}" in str(info.value)
    (root / "egtp" / "config.json").unlink()
    (root / "egtp" / "notes.txt").write_text("not read by any loader")
    (root / "egtp" / ".model.safetensors.tmp-0a1b2c3d.safetensors").write_bytes(b"a killed write")
    assert shipped_predictor("egtp", root).name == "egtp"  # neither could be read as weights or config
    (root / "constant" / "model.safetensors").write_bytes(b"weights beside a constant")
    with pytest.raises(ValueError, match=r"constant/model\.safetensors is not listed in"):
        shipped_predictor("constant", root)


@pytest.mark.parametrize(("text", "said"), [
    ("{not json", "is not valid JSON"),
    ('["a list"]', "is not a JSON object"),
    (None, "kind is 'probe', not 'egtp_static'"),
])
def test_a_manifest_that_is_not_one_is_a_one_line_error_naming_it(root, text, said):
    path = root / "egtp" / MANIFEST
    if text is None:
        _edit(root, "egtp", kind="probe")
    else:
        path.write_text(text)
    with pytest.raises(ValueError) as info:
        shipped_predictor("egtp", root)
    message = str(info.value)
    assert str(path) in message and said in message and "\n" not in message
    with pytest.raises(ValueError, match=said):
        shipped_summary(root)


@pytest.mark.parametrize(("changes", "said"), [
    ({"files": ["model.safetensors"]}, "files must be a JSON object"),
    ({"files": {"../egtp/model.safetensors": "0" * 64}},
     "files lists '../egtp/model.safetensors', not a file name of the predictor's folder"),
    ({"files": {"model.safetensors": "abc", "model.json": "0" * 64}}, "files.model.safetensors must be a SHA-256"),
    ({"model": None}, "model must be a JSON text"),
    ({"config": "hot"}, "config must be a JSON object"),
])
def test_a_manifest_of_the_wrong_shape_is_named_with_its_field(root, changes, said):
    _edit(root, "egtp", **changes)
    with pytest.raises(ValueError) as info:
        shipped_predictor("egtp", root)
    assert f"predictor manifest '{root / 'egtp' / MANIFEST}': {said}" in str(info.value)


def test_a_constant_without_a_numeric_median_is_refused(root):
    _edit(root, "constant", config={"median": "238"})
    with pytest.raises(ValueError, match=r"config\.median must be a number"):
        shipped_predictor("constant", root)
    _edit(root, "constant", config={"median": 238.0}, files={"model.json": "0" * 64})
    with pytest.raises(ValueError, match="shipped predictor 'constant' lacks model.json"):  # listed, yet absent
        shipped_predictor("constant", root)


def test_a_baseline_that_names_no_baseline_the_catalog_ships_is_refused(tmp_path):
    shutil.copytree(SHIPPED_DIR / "ssjf-reg", tmp_path / "ssjf-reg")
    _edit(tmp_path, "ssjf-reg", config={"baseline": "pia"})
    with pytest.raises(ValueError, match=r"config\.baseline must be one of ssjf-reg, ssjf-mc, s3, trail, ltr, not"):
        shipped_predictor("ssjf-reg", tmp_path)


def test_every_shipped_manifest_lists_exactly_the_files_its_loader_reads():
    for name in shipped_names():
        files = shipped_predictor(name)
        assert set(files.reads) == set(files.manifest["files"]), name
        on_disk = {f.name for f in files.folder.iterdir()} - {MANIFEST}
        assert on_disk == set(files.reads), name


# --- predictors of the store ------------------------------------------------------------------------------------


@pytest.fixture
def trained(store):
    synthetic_dataset(store, "syn", n=40)
    train_static(store, "syn", poolings=("egtp",), config=HeadConfig(epochs=2, hidden=8))
    return store


def test_a_stored_predictor_records_its_files_hashes_and_a_changed_file_is_refused(trained, tmp_path):
    local = store_predictor(trained, "egtp", "syn")
    assert set(local.manifest["files"]) == {local.path.name, local.path.with_suffix(".json").name}
    assert "artifact_files" not in local.manifest["config"]  # the hashes are the manifest's files, not its config
    _flip_last_byte(local.path)
    with pytest.raises(ValueError) as info:
        load_predictor_files("egtp", trained, "syn")
    message = str(info.value)
    assert f"{local.path} does not match the hash in its manifest" in message
    assert "python -m lenscope train-egtp --pooling egtp --dataset syn" in message
    with pytest.raises(ValueError, match="does not match the hash"):  # nothing tampered is shipped either
        ship_predictors(trained, "syn", tmp_path / "shipped")
    assert not (tmp_path / "shipped" / "egtp").exists()


def test_a_stored_predictor_saved_without_hashes_is_refused_with_the_command_to_retrain_it(trained):
    row = trained.predictors_frame("egtp_static").iloc[0]
    config = {k: v for k, v in row["config"].items() if k != "artifact_files"}  # a row an older lenscope wrote
    trained.save_predictor(row["name"], row["kind"], config, row["metrics"], row["artifact_path"],
                           dataset_id=int(row["dataset_id"]))
    with pytest.raises(ValueError) as info:
        store_predictor(trained, "egtp", "syn")
    assert "stored predictor 'egtp_static-egtp-syn-L30' was trained before lenscope recorded the hashes" in (
        str(info.value))
    assert "train it again with `python -m lenscope train-egtp --pooling egtp --dataset syn`" in str(info.value)


def test_a_stored_probe_folder_is_checked_file_by_file(trained):
    from lenscope.jobs.predictors.artifacts import with_artifact_hashes  # what training calls on saving a row

    folder = LengthProbe(ProbeConfig(in_dim=4, layer=15)).save(get_settings().artifact_path("probes", "p"))
    config = with_artifact_hashes({"dataset": "syn", "layer": 15, "layers": [15]}, folder)
    assert set(config["artifact_files"]) == {"config.json", "model.safetensors"}
    trained.save_predictor(probe_name("syn", 15, "regression"), "probe", config, {}, str(folder))
    files = store_predictor(trained, "probe", "syn")
    assert files.folder == folder and set(files.manifest["files"]) == set(files.reads)
    (folder / "extra.safetensors").write_bytes(b"weights nobody trained")
    with pytest.raises(ValueError, match=r"extra\.safetensors is not listed in the store's row of stored predictor "
                                         r"'probe:syn:L15:regression'.*train-probe --layer 15 --dataset syn"):
        store_predictor(trained, "probe", "syn")
    (folder / "extra.safetensors").unlink()
    (folder / "config.json").unlink()
    with pytest.raises(ValueError, match="stored predictor 'probe:syn:L15:regression' lacks config.json"):
        store_predictor(trained, "probe", "syn")


def test_a_ship_that_fails_midway_leaves_the_previous_predictor_loadable(trained, tmp_path, monkeypatch):
    root = tmp_path / "predictors"
    assert ship_predictors(trained, "syn", root) == ["egtp", "constant"]
    before = {f.name: f.read_bytes() for f in (root / "egtp").iterdir()}
    train_static(trained, "syn", poolings=("egtp",), config=HeadConfig(epochs=2, hidden=4))  # new weights

    def copy_then_fail(src, dst):
        with open(dst, "wb") as handle:
            handle.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr("lenscope.jobs.predictors.catalog.shutil.copyfile", copy_then_fail)
    with pytest.raises(OSError):
        ship_predictors(trained, "syn", root)
    assert {f.name: f.read_bytes() for f in (root / "egtp").iterdir()} == before
    assert shipped_predictor("egtp", root).manifest["config"]["head"]["hidden"] == 8


def test_predictions_written_to_a_file_are_whole_or_not_at_all(tmp_path, monkeypatch):
    out = tmp_path / "predictions.csv"
    out.write_text("id,predicted_tokens\nold,1.0\n")
    frame = pd.DataFrame({"id": ["a"], "predicted_tokens": [12.34]})

    def cut_short(self, path, **kwargs):
        with open(path, "w") as handle:
            handle.write("id,predic")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", cut_short)
    with pytest.raises(OSError):
        write_predictions(frame, out)
    assert out.read_text() == "id,predicted_tokens\nold,1.0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.csv"]
