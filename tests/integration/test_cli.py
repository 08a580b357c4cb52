"""The CLI as a whole: discovery of sub-commands and the benchmark runner."""

import pytest

from lenscope.cli import build_parser, main

EXPECTED = {"collect", "train-egtp", "train-plp", "attribution", "train-drafter", "train-probe",
            "train-baselines", "simulate", "calibrate-cost", "benchmark", "claims", "export-generations",
            "import-generations"}


def test_every_command_is_registered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert EXPECTED <= set(sub.choices)


def test_benchmark_runs_a_script(capsys):
    assert main(["benchmark", "scheduler", "--sizes", "200"]) == 0
    out = capsys.readouterr().out
    assert "sim s/wall s" in out and "200" in out


def test_unknown_benchmark_is_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["benchmark", "nope"])
    assert "invalid choice" in capsys.readouterr().err


def test_training_commands_default_to_the_study_dataset(store, capsys):
    from lenscope.cli import main
    from tests.fakes import fake_target

    assert main(["train-egtp"]) == 2
    assert "no dataset yet; run `python -m lenscope study`" in capsys.readouterr().err
    model_id = store.ensure_model(fake_target())
    for name in ("starter", "study"):
        store.ensure_dataset(name, model_id, {})
        assert main(["train-probe"]) == 2  # both are empty: the error names the dataset it picked
        assert f"dataset '{name}' has no runs" in capsys.readouterr().err
