"""A read-only store is refused before any training starts, not after the work (one line naming the store)."""

from __future__ import annotations

import pytest

from lenscope.jobs.drafter.training import train_drafter_job, train_probe_job
from lenscope.jobs.egtp.heads import train_plp, train_static
from lenscope.jobs.predictors.baselines import train_baseline
from lenscope.jobs.study.pipeline import run_study
from lenscope.store.errors import StoreReadOnlyError
from lenscope.store.store import Store
from tests.fakes import fake_target
from tests.unit.store.test_store_ownership import _read_only, _store_with_a_dataset

JOBS = {
    "static heads": lambda store: train_static(store, "dev"),
    "PLP": lambda store: train_plp(store, "dev"),
    "probe": lambda store: train_probe_job(store, "dev"),
    "drafter": lambda store: train_drafter_job(store, fake_target("model-a"), "dev"),
    "baseline": lambda store: train_baseline(store, "dev", "ssjf-reg"),
    "study": lambda store: run_study(store, fake_target("model-a"), "dev", "tiny"),
}


@pytest.mark.parametrize("job", JOBS, ids=list(JOBS))
def test_training_on_a_read_only_store_is_refused_before_any_work(job, data_dir, monkeypatch):
    store, _ = _store_with_a_dataset()
    store.engine.dispose()

    def no_work(*args, **kwargs):
        raise AssertionError("read the runs before checking that the store can keep the result")

    for reader in ("lenscope.jobs.runs.datasets.dataset_runs", "lenscope.jobs.runs.datasets.all_runs"):
        monkeypatch.setattr(reader, no_work)
    with _read_only(data_dir, monkeypatch):
        with pytest.raises(StoreReadOnlyError, match=r"is read-only \(the file is not writable\): (training|the "
                                                     r"study) .* writes to it"):
            JOBS[job](Store())


@pytest.mark.parametrize("argv", [["train-drafter", "--dataset", "dev"], ["train-probe", "--dataset", "dev"],
                                  ["train-egtp", "--dataset", "dev"], ["train-plp", "--dataset", "dev"],
                                  ["train-baselines", "--dataset", "dev", "--only", "pia"],
                                  ["import-generations", "gen.jsonl.gz", "--dataset", "dev"],
                                  ["collect", "--dataset", "dev", "--n", "1"], ["study", "--size", "tiny"]],
                         ids=lambda argv: argv[0])
def test_a_command_that_writes_the_store_refuses_a_read_only_one_before_the_model_loads(argv, data_dir, monkeypatch,
                                                                                        capsys):
    from lenscope.cli import main

    store, _ = _store_with_a_dataset()
    store.engine.dispose()

    def no_model(*args, **kwargs):
        raise AssertionError("loaded the model before checking that the store can keep the result")

    monkeypatch.setattr("lenscope.cli._common.load_target", no_model)
    monkeypatch.setattr("lenscope.models.target.TargetModel.load", no_model)
    with _read_only(data_dir, monkeypatch):
        assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"`lenscope {argv[0]}` writes to it" in err[0], err
