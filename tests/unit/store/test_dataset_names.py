"""Dataset names are checked wherever a name enters, and no artifact path leaves the data folder."""

from __future__ import annotations

import pytest

from lenscope.cli import main
from lenscope.jobs.drafter.training import drafter_name, probe_name
from lenscope.jobs.egtp.heads import STATIC_KIND, predictor_name
from lenscope.jobs.predictors.baselines import baseline_name
from lenscope.store.names import MAX_DATASET_NAME, dataset_name
from lenscope.store.settings import get_settings
from tests.fakes import fake_target

ESCAPE = "../../../../../escape/x"


@pytest.mark.parametrize("name", ["study", "starter", "tiny", "mine-2", "a.b_c", "S" * MAX_DATASET_NAME])
def test_plain_names_are_dataset_names(name):
    assert dataset_name(name) == name


@pytest.mark.parametrize("name", ["", ESCAPE, "a/b", "..", ".hidden", "-x", "a b", "naïve", "a\x00b", "a\\b",
                                  "S" * (MAX_DATASET_NAME + 1)])
def test_other_names_are_refused_saying_the_rule(name):
    with pytest.raises(ValueError, match="is not allowed: a dataset name is 1 to 64 letters, digits"):
        dataset_name(name)


def test_a_long_name_is_not_echoed_whole():
    with pytest.raises(ValueError) as caught:
        dataset_name("x" * 10_000)
    assert len(str(caught.value)) < 300 and "10,000 characters" in str(caught.value)


def test_a_name_that_is_not_text_is_a_type_error():
    with pytest.raises(TypeError, match="a dataset name is a str, not int"):
        dataset_name(3)


@pytest.mark.parametrize("group, name", [("egtp", predictor_name(STATIC_KIND, ESCAPE, 30)),
                                         ("drafters", drafter_name(ESCAPE, "outlets")),
                                         ("probes", probe_name(ESCAPE, 15, "regression")),
                                         ("baselines", baseline_name("ssjf-reg", ESCAPE))])
def test_every_artifact_path_stays_in_the_data_folder(data_dir, group, name):
    settings = get_settings()
    with pytest.raises(ValueError, match="would be written outside the data folder"):
        settings.artifact_path(group, name)
    path = settings.artifact_path(group, name.replace(ESCAPE, "study"))
    assert path.parent == (data_dir / "artifacts" / group).resolve()


def test_an_artifact_folder_linked_outside_is_refused(data_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (data_dir / "artifacts").mkdir(parents=True)
    (data_dir / "artifacts" / "egtp").symlink_to(outside)
    with pytest.raises(ValueError, match="outside the data folder"):
        get_settings().artifact_path("egtp", "static-egtp-study-L30", ".safetensors")


def test_the_store_creates_no_dataset_of_another_name(store):
    with pytest.raises(ValueError, match="is not allowed"):
        store.ensure_dataset(ESCAPE, fake_target(), {})
    assert store.datasets_frame().empty


@pytest.mark.parametrize("argv", [["train-egtp", "--dataset", ESCAPE], ["import-generations", "x.jsonl.gz",
                                                                        "--dataset", ESCAPE],
                                  ["predict", "--prompts", "p.txt", "--dataset", ESCAPE],
                                  ["export-runs", "--dataset", ESCAPE, "--out", "x.csv"]])
def test_the_cli_refuses_the_name_before_any_work(argv, data_dir, capsys):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "argument --dataset: dataset name '../../../../../escape/x' is not allowed" in err
    assert not data_dir.exists()
