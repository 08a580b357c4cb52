"""Every ``--help``: each option has a help line and shows its default, one formatter for all parsers, ``--version``,
and the predictor choices explained (what each is, and its source) where they are registered."""

from __future__ import annotations

import argparse
import re

import pytest

from lenscope.cli import build_parser, main
from lenscope.cli._common import HelpFormatter

PARSER = build_parser()
SUB = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
COMMANDS = dict(SUB.choices)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _shows_default(action: argparse.Action) -> bool:
    """Whether the action has a default worth showing (not None, off or empty)."""
    default = action.default
    return not (default is None or default is False or default is argparse.SUPPRESS
                or (isinstance(default, (str, list, tuple)) and not default))


@pytest.mark.parametrize("command", ["lenscope", *sorted(COMMANDS)])
def test_every_option_has_a_help_line_and_shows_its_default(command):
    parser = PARSER if command == "lenscope" else COMMANDS[command]
    assert parser.formatter_class is HelpFormatter, f"{command}: another formatter"
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        flag = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"`lenscope {command}` {flag} has no help line"
        if _shows_default(action) and action.option_strings:
            text = HelpFormatter(command)._get_help_string(action)
            assert "default" in text.lower(), f"`lenscope {command}` {flag}: default {action.default!r} not shown"
    text = parser.format_help()  # renders (no stray % in a help string)
    assert "usage:" in text


def test_defaults_are_shown_once_and_descriptions_keep_their_lines(capsys):
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--help"])
    assert info.value.code == 0
    out = _flat(capsys.readouterr().out)
    assert "prefill instances (disaggregated mode) (default: 1)" in out  # --n-prefill: a help line and its default
    assert "(default: 0.5)" in out and "default: default:" not in out and "(default: None)" not in out
    assert out.startswith("usage: lenscope simulate") and "replay a request trace" in out  # the command's own line
    with pytest.raises(SystemExit):
        main(["train-egtp", "--help"])
    out = _flat(capsys.readouterr().out)
    for text in ("--epochs EPOCHS training epochs over the train split (default: 60)",
                 "--lr LR AdamW learning rate (default: 0.001)"):
        assert text in out


def test_version_comes_from_the_package_metadata(capsys):
    from importlib.metadata import version

    import lenscope

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"lenscope {version('lenscope')}" == f"lenscope {lenscope.__version__}"


def test_a_checkout_without_metadata_reads_its_pyproject(monkeypatch):
    import importlib.metadata

    import lenscope

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert re.fullmatch(r"\d+\.\d+\.\d+.*\+checkout", lenscope._version())


def test_each_scheduler_predictor_kind_says_what_it_is_once_where_it_is_registered():
    from lenscope.analysis.scheduler.registry import PREDICTORS

    help_text = _flat(next(a for a in COMMANDS["simulate"]._actions if a.dest == "predictor").help)
    for name in PREDICTORS.names():
        description = PREDICTORS.description(name)
        assert description == PREDICTORS.entry(name).predictor.description  # declared on the kind's class
        assert len(description) > 40 and description not in (name, PREDICTORS.label(name)), name
        assert f"{name}: {_flat(description)}" in help_text
    assert "oracle: oracle;" not in help_text and "constant: constant" not in help_text


def test_each_catalog_predictor_and_baseline_names_its_source():
    from lenscope.analysis.baselines import PAPERS
    from lenscope.jobs.predictors.baselines import BASELINES
    from lenscope.jobs.predictors.catalog import CATALOG

    assert set(PAPERS) == set(BASELINES)
    for name, entry in CATALOG.items():
        assert entry.description and entry.source, name
    predict = _flat(COMMANDS["predict"].format_help())
    baselines = _flat(COMMANDS["train-baselines"].format_help())
    for name in ("egtp", "mean", "max", "last", "plp", "probe", "drafter", "constant"):
        assert f"{name}: " in predict and _flat(CATALOG[name].source) in predict
    for name in BASELINES:
        assert f"{name}: " in baselines and _flat(PAPERS[name]) in baselines


def test_collect_says_where_it_writes_without_dataset():
    action = next(a for a in COMMANDS["collect"]._actions if a.dest == "dataset")
    assert action.default is None and "'default'" in action.help
