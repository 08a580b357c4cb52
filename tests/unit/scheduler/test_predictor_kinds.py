"""Predictor kinds in the registry: each with its own typed options (ranges, flags, form fields, label), specs built
from them, stored results' keys as before the options were typed, and the CLI reading each kind's own flags."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest

from lenscope.analysis.scheduler.predictors import NUMBER, PredictorOptions
from lenscope.analysis.scheduler.registry import PREDICTORS, kinds_taking, predictor_kind, predictor_options
from lenscope.cli import build_parser
from lenscope.cli.scheduler import FLAG_READERS, FLAG_TYPES, specs_from
from lenscope.jobs.scheduler.predictor_spec import STORE_INPUTS, PredictorSpec


def _simulate_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["simulate", "--trace", "t.csv", *argv])


def test_every_kind_declares_frozen_typed_options_with_a_label():
    for name in PREDICTORS.names():
        options = predictor_kind(name).options
        assert issubclass(options, PredictorOptions) and dataclasses.is_dataclass(options)
        with pytest.raises(dataclasses.FrozenInstanceError):
            options().x = 1
        assert options().label() and PredictorSpec(name).label() == options().label()
        assert predictor_kind(name).build == predictor_kind(name).predictor.build
    assert {n: len(predictor_kind(n).options.options()) for n in PREDICTORS.names()} == {
        "oracle": 0, "oracle-noise": 2, "constant": 1, "stored": 1, "trace-column": 0, "empirical": 1}


def test_every_asked_option_has_a_flag_and_a_form_field_for_its_source():
    from lenscope.app.scheduler import FORM_FIELDS

    flags = {a.dest: a for a in build_parser()._subparsers._group_actions[0].choices["simulate"]._actions}
    for name, option in predictor_options().items():
        if option.flag is None:
            continue
        assert flags[name].option_strings == [option.flag] and flags[name].default == option.ask
        assert option.source in FORM_FIELDS
        assert (option.source in FLAG_TYPES) == (option.source in FLAG_READERS)
        assert option.source in FLAG_TYPES or option.valid is not None  # else a number flag of its range
        if option.source == NUMBER:
            assert option.valid is not None and option.high is not None and option.valid.contains(option.ask)


def test_only_the_kinds_that_read_the_store_register_store_inputs():
    readers = {n for n in PREDICTORS.names() if predictor_kind(n).options in STORE_INPUTS}
    assert readers == {"stored", "empirical"}


def test_specs_take_their_own_options_only_and_check_their_ranges():
    spec = PredictorSpec("oracle-noise", mae=30.0, seed=4)
    assert spec.options.mae == 30.0 and spec.label() == "oracle+noise (MAE 30)" and spec.takes("mae")
    assert spec.with_options(mae=5.0).label() == "oracle+noise (MAE 5)" and spec.with_options(mae=5.0).seed == 4
    assert dataclasses.replace(spec, seed=9) == PredictorSpec("oracle-noise", mae=30.0, seed=9)
    assert PredictorSpec("constant", constant=99.0).label() == "constant 99"
    assert PredictorSpec("stored", predictor_id=7).label() == "stored predictor #7"
    assert PredictorSpec("empirical", predictions="abcdef0123").label() == "empirical (file abcdef01)"
    with pytest.raises(ValueError, match="the oracle predictor takes no option constant"):
        PredictorSpec("oracle", constant=300.0)
    with pytest.raises(ValueError, match="^mae must be a finite number >= 0"):
        PredictorSpec("constant", mae=-1.0)  # out of range reads the same whichever kind it was meant for
    with pytest.raises(ValueError, match="^update_every must be an integer >= 1"):
        PredictorSpec("oracle-noise", update_every=0)
    with pytest.raises(ValueError, match="unknown predictor 'psychic'"):
        PredictorSpec("psychic")
    with pytest.raises(TypeError, match="options are"):
        PredictorSpec("oracle", options=predictor_kind("constant").options())
    assert not PredictorSpec().takes("mae") and kinds_taking("mae") == ("oracle-noise",)


# The keys results were stored under by the flat spec of old (dataclasses.asdict of kind, mae, constant,
# predictor_id, seed, update_every, predictions) for the same predictors.
OLD_KEYS = [
    (PredictorSpec(), {"kind": "oracle", "mae": 0.0, "constant": 256.0, "predictor_id": None, "seed": 0,
                       "update_every": 32, "predictions": None}),
    (PredictorSpec("oracle-noise", mae=50.0, seed=3), {"kind": "oracle-noise", "mae": 50.0, "constant": 256.0,
                                                      "predictor_id": None, "seed": 3, "update_every": 32,
                                                      "predictions": None}),
    (PredictorSpec("constant", constant=129.0, seed=1), {"kind": "constant", "mae": 0.0, "constant": 129.0,
                                                         "predictor_id": None, "seed": 1, "update_every": 32,
                                                         "predictions": None}),
    (PredictorSpec("stored", predictor_id=12), {"kind": "stored", "mae": 0.0, "constant": 256.0, "predictor_id": 12,
                                                "seed": 0, "update_every": 32, "predictions": None}),
    (PredictorSpec("empirical", predictions="ab" * 32), {"kind": "empirical", "mae": 0.0, "constant": 256.0,
                                                          "predictor_id": None, "seed": 0, "update_every": 32,
                                                          "predictions": "ab" * 32}),
]


@pytest.mark.parametrize("spec, old", OLD_KEYS, ids=lambda v: v.kind if isinstance(v, PredictorSpec) else "")
def test_stored_results_keep_their_keys(spec, old):
    assert spec.key() == old


def test_different_specs_never_share_a_key():
    specs = [spec for spec, _ in OLD_KEYS] + [PredictorSpec("trace-column"), PredictorSpec(seed=1),
                                               PredictorSpec("oracle-noise", mae=50.0, seed=3, update_every=16)]
    keys = [repr(sorted(s.key().items())) for s in specs]
    assert len(set(keys)) == len(specs)


def test_the_cli_reads_each_kinds_own_flags():
    assert specs_from(_simulate_args("--constant", "300"), None, ["oracle"]) == [PredictorSpec()]
    assert specs_from(_simulate_args("--constant", "300", "--seed", "2"), None, ["constant", "oracle-noise"]) == [
        PredictorSpec("constant", constant=300.0, seed=2), PredictorSpec("oracle-noise", mae=50.0, seed=2)]
    assert specs_from(_simulate_args("--predictor-id", "4"), None, ["stored"]) == [PredictorSpec("stored",
                                                                                               predictor_id=4)]
    with pytest.raises(ValueError, match="--predictor empirical and --predictions PATH go together"):
        specs_from(_simulate_args(), None, ["oracle", "empirical"])
    with pytest.raises(ValueError, match="--predictor empirical and --predictions PATH go together"):
        specs_from(_simulate_args("--predictions", "p.csv"), None, ["oracle"])


def test_make_predictor_splits_own_options_from_inputs():
    from lenscope.analysis.scheduler import make_predictor

    lengths = np.array([5, 9, 40])
    assert make_predictor("constant", lengths, constant=7.0, mae=3.0).static(2) == 7.0  # others' options ignored
    noisy = make_predictor("oracle-noise", lengths, mae=0.0, seed=3)
    assert [noisy.static(i) for i in range(3)] == [5.0, 9.0, 40.0]
    with pytest.raises(ValueError, match="^constant must be"):
        make_predictor("constant", lengths, constant=0.5)
