"""The CLI as a whole: discovery of sub-commands and the benchmark runner."""

import pytest

from lenscope.cli import build_parser, main

EXPECTED = {"collect", "train-egtp", "train-plp", "attribution", "train-drafter", "train-probe",
            "train-baselines", "simulate", "evaluate-predictions", "calibrate-cost", "benchmark", "claims",
            "export-generations", "import-generations", "doctor", "study", "report", "speculative", "predict",
            "publish-results", "ship-predictors", "export-runs"}


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


def test_bad_arguments_fail_before_any_work(data_dir, tmp_path, capsys, monkeypatch):
    import pytest

    from lenscope.cli import main

    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: pytest.fail("loaded the model"))
    for argv, message in [
        (["collect", "--max-new-tokens", "0"], "argument --max-new-tokens: expected an integer >= 1, not '0'"),
        (["collect", "--n", "x"], "argument --n: expected an integer >= 1, not 'x'"),
        (["simulate", "--trace", "t.csv", "--out", str(tmp_path / "missing" / "out.csv")],
         f"argument --out: folder '{tmp_path / 'missing'}' does not exist"),
        (["report", "--out", str(tmp_path)], "is a folder; give a file name"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, argv
    from lenscope.store.store import Store

    assert Store().datasets_frame().empty  # nothing was created


def test_a_missing_predictor_is_named(data_dir):
    import pandas as pd
    import pytest

    from lenscope.jobs.scheduler.replay import PredictorSpec, build_predictor
    from lenscope.store.store import Store

    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [7], "run_id": [1]})
    with pytest.raises(ValueError, match="no trained predictor with id 99999"):
        build_predictor(Store(), PredictorSpec(kind="stored", predictor_id=99999), trace)


def test_an_interrupted_command_says_it_resumes_without_a_traceback(data_dir, capsys, monkeypatch):
    from lenscope.cli import main

    def interrupted(args):
        raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr("lenscope.cli.claims.run_claims", interrupted)
    assert main(["claims", "--dataset", "any"]) == 130
    err = capsys.readouterr().err
    assert "interrupted; what finished is stored, and the same command resumes" in err and "Traceback" not in err


def test_store_failures_end_in_one_message_and_exit_2(data_dir, capsys, monkeypatch):
    data_dir.mkdir(parents=True)
    (data_dir / "lenscope.db").write_bytes(b"garbage" * 200)
    assert main(["doctor"]) == 2
    err = capsys.readouterr().err
    assert "lenscope doctor: error: the database file" in err and "is not a lenscope store" in err
    assert "Traceback" not in err
    monkeypatch.setenv("LENSCOPE_DB_URL", "postgresql+psycopg2://u:secret@127.0.0.1:9/x?connect_timeout=2")
    assert main(["claims", "--dataset", "any"]) == 2
    err = capsys.readouterr().err
    assert "PostgreSQL at 127.0.0.1:9 is not reachable" in err and "secret" not in err


def test_a_defect_is_named_and_debug_shows_the_traceback(data_dir, capsys, monkeypatch):
    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr("lenscope.cli.claims.run_claims", broken)
    assert main(["claims", "--dataset", "any"]) == 1
    err = capsys.readouterr().err
    assert "internal error: KeyError" in err and "--debug" in err and "Traceback" not in err
    with pytest.raises(KeyError, match="a bug"):
        main(["--debug", "claims", "--dataset", "any"])


def test_doctor_reports_damage_then_repairs_it(store, capsys):
    from tests.fakes import fake_generation, fake_target

    run_id = store.save_run(fake_target(), "a prompt", fake_generation(3, 4))
    assert main(["doctor"]) == 0 and "the store is healthy" in capsys.readouterr().out
    path = next(p for p in store.tensors.files())
    path.write_bytes(path.read_bytes()[:50])
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert f"1 run(s) with a missing or damaged tensor file: {run_id}" in out and "doctor --fix" in out
    assert main(["doctor", "--fix", "--no-regenerate"]) == 0
    assert "fixed: marked 1 run(s) for regeneration" in capsys.readouterr().out
    assert [r.run_id for r in store.damaged_requests()] == [run_id]
