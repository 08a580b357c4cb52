"""Hostile numbers: every numeric input (CLI flag, settings object, cost file, form text) is finite, in its range and
integral where it must be, refused with one line naming it and its range, before anything is loaded or written."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from lenscope.cli import build_parser, main
from lenscope.cli._common import Number
from lenscope.models.numbers import NON_NEGATIVE, POSITIVE, POSITIVE_INT, SEED, Range

# --- the ranges themselves -------------------------------------------------------------------------------------


@pytest.mark.parametrize("valid, text", [
    (Range(0, 10), "nan"), (Range(0, 10), "inf"), (Range(0, 10), "-inf"), (Range(0, 10), "-1"), (Range(0, 10), "11"),
    (Range(0, 1, low_open=True), "0"), (POSITIVE, "0"), (POSITIVE, "1e999"), (POSITIVE_INT, "0"),
    (POSITIVE_INT, "2.5"), (POSITIVE_INT, "x"), (POSITIVE_INT, ""), (SEED, "-1"), (SEED, str(2**32)),
    (NON_NEGATIVE, "NaN"), (NON_NEGATIVE, "one"),
])
def test_a_range_refuses_text_outside_it_and_says_what_it_takes(valid, text):
    with pytest.raises(ValueError) as info:
        valid.parse(text)
    assert str(info.value) == f"expected {valid.describe()}, not {text!r}"


def test_a_range_parses_what_it_takes():
    assert Range(0, 10).parse(" 0.7 ") == 0.7 and Range(0, 1, low_open=True).parse("1") == 1.0
    assert POSITIVE_INT.parse("12") == 12 and isinstance(POSITIVE_INT.parse("12"), int)
    assert SEED.parse(str(2**32 - 1)) == 2**32 - 1
    assert POSITIVE.parse_list("2, 0.5,,") == [2.0, 0.5] and POSITIVE.parse_list("") == []
    with pytest.raises(ValueError, match=r"each a positive finite number, not 'nan' \(in '1,nan'\)"):
        POSITIVE.parse_list("1,nan")


def test_ranges_describe_themselves():
    assert Range(0, 10).describe() == "a finite number in [0, 10]"
    assert Range(0, 1, low_open=True).describe() == "a finite number in (0, 1]"
    assert POSITIVE.describe() == "a positive finite number" and NON_NEGATIVE.describe() == "a finite number >= 0"
    assert POSITIVE_INT.describe() == "an integer >= 1" and SEED.describe() == "an integer in [0, 4294967295]"


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, "1", None, True, 1.5])
def test_check_refuses_values_outside_the_range_and_non_numbers(value):
    with pytest.raises(ValueError, match="n must be an integer >= 0, not "):
        Range(0, integral=True).check("n", value)


def test_check_takes_numpy_numbers():
    assert Range(0, integral=True).check("n", np.int64(3)) == 3
    assert Range(0, 1).check("p", np.float32(0.5)) == 0.5
    with pytest.raises(ValueError, match="p must be"):
        Range(0, 1).check("p", np.float64("nan"))


# --- the same bounds at the source: settings objects, the cost model, the app's text fields ---------------------


@pytest.mark.parametrize("field, value", [("temperature", math.nan), ("temperature", -1.0), ("temperature", math.inf),
                                          ("top_p", 2.0), ("top_p", 0.0), ("max_new_tokens", 0),
                                          ("max_new_tokens", 8.0), ("seed", 1.5), ("seed", -1)])
def test_generation_settings_refuse_what_the_sampler_cannot_take(field, value):
    from lenscope.models.engine import GenerationSettings

    with pytest.raises(ValueError, match=f"^{field} must be "):
        GenerationSettings(**{field: value})
    assert GenerationSettings(16, 0.0, 1.0, 0).temperature == 0.0  # greedy is fine


@pytest.mark.parametrize("field, value", [("aging_s", -1.0), ("aging_s", math.nan), ("n_decode", 0),
                                          ("n_decode", 2.5), ("kv_capacity_tokens", math.inf), ("seed", -3),
                                          ("preempt_limit", math.nan), ("hash_block_tokens", 0)])
def test_sim_config_refuses_numbers_out_of_range(field, value):
    from lenscope.analysis.scheduler.engine import SimConfig

    with pytest.raises(ValueError, match=f"^{field} must be "):
        SimConfig(**{field: value})


@pytest.mark.parametrize("field, value", [("constant", math.nan), ("constant", 0.5), ("mae", -1.0),
                                          ("mae", math.inf), ("seed", -1), ("predictor_id", 1.5)])
def test_predictor_spec_refuses_numbers_out_of_range(field, value):
    from lenscope.jobs.scheduler.replay import PredictorSpec

    with pytest.raises(ValueError, match=f"^{field} must be "):
        PredictorSpec(**{field: value})


@pytest.mark.parametrize("phase, key, value", [("prefill", "a", -1.0), ("decode", "c", math.nan),
                                               ("decode", "d", math.inf), ("prefill", "b", "0.1")])
def test_a_cost_model_refuses_negative_or_non_finite_coefficients_by_key(phase, key, value):
    from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, CostModel, LinearCost

    data = DEFAULT_COST.to_dict()
    data[phase][key] = value
    with pytest.raises(ValueError, match=rf"^{phase}\.{key} must be a finite number >= 0, not "):
        CostModel.from_dict(data)
    with pytest.raises(ValueError, match=f"^{key} must be a finite number >= 0"):
        LinearCost(**data[phase])
    with pytest.raises(ValueError, match="kv_transfer_base_s must be"):
        CostModel.from_dict({**DEFAULT_COST.to_dict(), "kv_transfer_base_s": -1e-3})
    assert CostModel.from_dict(DEFAULT_COST.to_dict()) == DEFAULT_COST


@pytest.mark.parametrize("data", [[1, 2], {"prefill": {}}, {"prefill": {"a": 1, "b": 0, "c": 0, "d": 0, "e": 1},
                                                             "decode": {"a": 1, "b": 0, "c": 0, "d": 0}}])
def test_a_cost_model_of_the_wrong_shape_is_a_clear_error(data):
    from lenscope.analysis.scheduler.cost_model import CostModel

    with pytest.raises(ValueError, match="coefficients a, b, c, d"):
        CostModel.from_dict(data)


def test_the_apps_comma_separated_fields_refuse_nan_and_infinity():
    from lenscope.jobs.scheduler.qps_sweep import parse_qps
    from lenscope.jobs.scheduler.replay import parse_maes

    for text in ("nan", "1, inf", "0", "-2"):
        with pytest.raises(ValueError, match="QPS values: expected comma-separated numbers, each a positive"):
            parse_qps(text)
    with pytest.raises(ValueError, match="MAE values: .* not 'nan'"):
        parse_maes("0, nan")
    with pytest.raises(ValueError, match="at least one"):
        parse_qps(" , ")
    assert parse_qps("4, 1,1") == [1.0, 4.0] and parse_maes("0, 25") == [0.0, 25.0]


def test_a_dataset_trace_needs_a_positive_qps(store):
    from lenscope.jobs.scheduler.replay import dataset_trace

    for qps in (0.0, math.nan, -1.0):
        with pytest.raises(ValueError, match="qps must be a positive finite number"):
            dataset_trace(store, "any", qps)


# --- the CLI: one line naming the flag and its range, exit 2, nothing loaded or written --------------------------


def _refused(argv, capsys) -> str:
    """The one line a refused command prints (after checking exit 2 and no traceback)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2, argv
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.err and captured.out == "", (argv, captured)
    return lines[0]


@pytest.mark.parametrize("argv, message", [
    (["collect", "--temperature", "nan"], "argument --temperature: expected a finite number in [0, 10], not 'nan'"),
    (["collect", "--temperature", "-1"], "argument --temperature: expected a finite number in [0, 10], not '-1'"),
    (["collect", "--top-p", "2"], "argument --top-p: expected a finite number in (0, 1], not '2'"),
    (["collect", "--seed", "1.5"], "argument --seed: expected an integer in [0, 4294967295], not '1.5'"),
    (["collect", "--max-new-tokens", "0"], "argument --max-new-tokens: expected an integer >= 1, not '0'"),
    (["collect", "--n", "x"], "argument --n: expected an integer >= 1, not 'x'"),
    (["collect", "--sources", "sharegpt=nan"], "argument --sources: sources must look like sharegpt=3,humaneval=1"),
    (["collect", "--batch-size", "-4"],
     "argument --batch-size: batch size must be 'auto' or a positive integer, not '-4'"),
    (["simulate", "--trace", "t.csv", "--aging-s", "-1"],
     "argument --aging-s: expected a finite number >= 0, not '-1'"),
    (["simulate", "--trace", "t.csv", "--constant", "nan"],
     "argument --constant: expected a finite number >= 1, not 'nan'"),
    (["simulate", "--trace", "t.csv", "--qps", "0"], "argument --qps: expected a positive finite number, not '0'"),
    (["simulate", "--trace", "t.csv", "--noise-mae", "-5"], "argument --noise-mae: expected a finite number >= 0"),
    (["simulate", "--trace", "t.csv", "--sweep", "--sweep-qps", "1,nan"],
     "argument --sweep-qps: expected comma-separated numbers, each a positive finite number, not 'nan'"),
    (["simulate", "--trace", "t.csv", "--sweep", "--sweep-qps", "1", "--seeds", "0,-1"],
     "argument --seeds: expected comma-separated numbers, each an integer in [0, 4294967295], not '-1'"),
    (["qps-sweep", "--trace", "t.csv", "--qps-values", "inf"], "argument --qps-values: expected comma-separated"),
    (["outlets-preset", "--trace", "t.csv", "--seeds", "0"], "argument --seeds: expected an integer >= 1, not '0'"),
    (["calibrate-cost", "--profile", "p.csv", "--tp", "0"], "argument --tp: expected an integer >= 1, not '0'"),
    (["train-egtp", "--lam", "1.5"], "argument --lam: expected a finite number in [0, 1], not '1.5'"),
    (["train-egtp", "--lr", "nan"], "argument --lr: expected a positive finite number, not 'nan'"),
    (["claims", "--folds", "1"], "argument --folds: expected an integer >= 2, not '1'"),
    (["speculative", "--temperature", "inf"], "argument --temperature: expected a finite number in [0, 10]"),
])
def test_a_hostile_number_is_one_line_and_exit_2_before_any_work(argv, message, data_dir, capsys):
    line = _refused(argv, capsys)  # (argparse exits before the command runs: no model, no store, no trace read)
    assert line.startswith(f"lenscope {argv[0]}: error: ") and message in line, line
    assert not data_dir.exists()  # no store, no file: nothing was written


@pytest.mark.parametrize("bad, key", [({"a": -1}, "prefill.a"), ({"a": math.nan}, "prefill.a"),
                                      ({"d": math.inf}, "prefill.d")])
def test_a_hostile_cost_json_names_its_file_and_key(bad, key, data_dir, tmp_path, capsys):
    from lenscope.analysis.scheduler.cost_model import DEFAULT_COST

    trace = tmp_path / "trace.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,10,5\n0.5,20,7\n")
    cost = DEFAULT_COST.to_dict()
    cost["prefill"].update(bad)
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(cost))  # NaN and Infinity as Python's json writes (and reads) them
    out = tmp_path / "latencies.csv"
    for command in (["simulate", "--out", str(out)], ["simulate", "--sweep", "--sweep-qps", "1", "--out", str(out)],
                    ["qps-sweep", "--out", str(out)], ["outlets-preset"]):
        assert main([*command, "--trace", str(trace), "--cost-json", str(path)]) == 2
        captured = capsys.readouterr()
        lines = [line for line in captured.err.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in captured.err, captured
        assert f"--cost-json {path}: {key} must be a finite number >= 0, not " in lines[0]
        assert captured.out == "" and not out.exists() and not data_dir.exists(), command


# --- every numeric flag of every command goes through the layer --------------------------------------------------


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


SUBPARSERS = _subparsers()


@pytest.mark.parametrize("command", sorted(SUBPARSERS))
def test_every_numeric_flag_uses_the_validation_layer(command):
    for action in SUBPARSERS[command]._actions:
        flag = "/".join(action.option_strings) or action.dest
        assert action.type not in (int, float), f"{command} {flag}: bare type={action.type.__name__}; use " \
                                                 "lenscope.cli._common.number(<range>)"
        default = action.default
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            assert isinstance(action.type, Number), f"{command} {flag}: a numeric default without a number type"
        if isinstance(action.type, Number) and default is not None:
            values = default if action.type.many else [default]
            assert all(action.type.valid.contains(v) for v in values), f"{command} {flag}: default {default!r} " \
                                                                       f"is not {action.type.valid.describe()}"
