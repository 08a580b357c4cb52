"""Benchmark records: written by the CLI after a benchmark finished (none after a failure or an interrupt), read
back validated, rendered as markdown with every figure; every benchmark returns its figures."""

from __future__ import annotations

import ast
import json
import re
import sys
import types
from pathlib import Path

import pytest

from lenscope.benchmarks import records
from lenscope.benchmarks.records import Machine, Number, Record, RecordError, read_records, records_markdown
from lenscope.cli import main

BENCHMARKS = Path(records.__file__).parent


@pytest.fixture(autouse=True)
def records_in_tmp(tmp_path, monkeypatch) -> Path:
    """Every record of these tests goes under tmp_path, never into the repository's data/benchmarks."""
    folder = tmp_path / "records"
    monkeypatch.setenv(records.RECORDS_ENV, str(folder))
    return folder


def a_record(**changes) -> Record:
    fields = dict(benchmark="egtp", what="Overhead of EGTP.", command="python -m lenscope benchmark egtp --repeats 3",
                  commit="0123456789abcdef0123456789abcdef01234567", uncommitted_changes=True,
                  date="2026-12-08T10:21:05Z",
                  machine=Machine("AMD EPYC", 2, 23.5, None, "3.11.7", "2.5.1", "Linux-6.1", 1.25, 2.5), wall_s=61.5,
                  numbers={"bare_forward_ms": Number(286.123456789, "ms", "a bare forward pass"),
                           "prompt_tokens": Number(1234, "tokens", "tokens | of the prompt"),
                           "same": Number(True, "", "bit for bit"), "nan": Number(float("nan"), "x", "no ratio")},
                  last_line="PLP update + head      0.350 ms   ratio to a decode step 0.0043")
    return Record(**(fields | changes))


def test_a_record_round_trips_through_its_file(tmp_path):
    record = a_record()
    path = records.write_record(record, tmp_path)
    assert path == tmp_path / "egtp.json"
    assert json.loads(path.read_text())["numbers"]["bare_forward_ms"] == {
        "value": 286.123, "unit": "ms", "what": "a bare forward pass"}  # six significant digits
    assert record.numbers["nan"].value is None
    assert read_records(tmp_path) == [record] == [records.read_record(path)]
    assert read_records(tmp_path / "none") == []


@pytest.mark.parametrize("text, says", [
    ("{not json", "Expecting property name"),
    (json.dumps({"benchmark": "egtp"}), "lacks schema, what, command"),
    ("numbers.wall.value", "number wall: value is \"fast\", not bool or int or float or null"),
    ("machine.cores", "machine: cores is \"two\", not int"),
    ("wall_s", "wall_s is true, not int or float"),
    ("date", "Invalid isoformat string"),
    ("schema", "schema 99 is not 1"),
])
def test_a_malformed_record_names_its_file(tmp_path, text, says):
    path = tmp_path / "egtp.json"
    if text.startswith("{"):
        path.write_text(text)
    else:
        data = json.loads(a_record().to_json())
        data["numbers"]["wall"] = {"value": 1.0, "unit": "s", "what": "w"}
        *parents, key = text.split(".")
        where = data
        for p in parents:
            where = where[p]
        where[key] = {"numbers.wall.value": "fast", "machine.cores": "two", "wall_s": True, "date": "yesterday",
                      "schema": 99}[text]
        path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=re.escape(f"benchmark record {path} is malformed")) as caught:
        read_records(tmp_path)
    assert says in str(caught.value)


def test_a_record_must_be_named_after_its_benchmark(tmp_path):
    (tmp_path / "drafter.json").write_text(a_record().to_json())
    with pytest.raises(RecordError, match="drafter.json is malformed: it records benchmark 'egtp'"):
        read_records(tmp_path)


def fake_benchmark(monkeypatch, fail: type[BaseException] | None = None) -> list[list[str]]:
    """The scheduler benchmark replaced by a tiny one: prints three lines, returns two figures (or raises ``fail``);
    returns the argument lists it was called with."""
    calls = []

    def fake_main(argv):
        calls.append(argv)
        print("| size | speed |")
        print(f"fast benchmark: {len(argv)} arguments\n")
        if fail:
            raise fail("stopped")
        return {"speed": Number(12_345.678, "requests/s", "how fast"), "ok": Number(True, "", "it worked")}

    module = types.ModuleType("lenscope.benchmarks.bench_scheduler", "A tiny benchmark. It measures nothing real.")
    module.main = fake_main
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return calls


def test_the_cli_records_a_finished_benchmark(monkeypatch, capsys, records_in_tmp):
    calls = fake_benchmark(monkeypatch)
    assert main(["benchmark", "scheduler", "--sizes", "10 20"]) == 0
    out, err = capsys.readouterr()
    assert "| size | speed |\nfast benchmark: 2 arguments\n" in out  # printed as before
    [record] = read_records(records_in_tmp)
    assert f"benchmark record: {records_in_tmp / 'scheduler.json'}" in err
    assert calls == [["--sizes", "10 20"]]
    assert record.benchmark == "scheduler" and record.what == "A tiny benchmark."
    assert record.command == "python -m lenscope benchmark scheduler --sizes '10 20'"
    assert record.last_line == "fast benchmark: 2 arguments"
    assert record.numbers == {"speed": Number(12_345.7, "requests/s", "how fast"), "ok": Number(True, "", "it worked")}
    assert record.commit is None or re.fullmatch(r"[0-9a-f]{40}", record.commit)
    assert record.machine.cores >= 1 and record.machine.python and record.wall_s >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record.date)
    other = records_in_tmp.parent / "elsewhere"
    assert main(["benchmark", "--records", str(other), "scheduler"]) == 0
    assert [r.command for r in read_records(other)] == ["python -m lenscope benchmark scheduler"]


@pytest.mark.parametrize("fail, code", [(RuntimeError, 1), (KeyboardInterrupt, 130), (SystemExit, None)])
def test_a_failed_or_interrupted_benchmark_writes_no_record(monkeypatch, records_in_tmp, fail, code):
    fake_benchmark(monkeypatch, fail)
    if code is None:
        with pytest.raises(SystemExit):
            main(["benchmark", "scheduler"])
    else:
        assert main(["benchmark", "scheduler"]) == code
    assert not records_in_tmp.exists()


@pytest.mark.parametrize("argv", [["--no-record", "scheduler", "-x"], ["scheduler", "--no-record", "-x"]])
def test_no_record_runs_the_benchmark_and_writes_nothing(monkeypatch, records_in_tmp, argv):
    calls = fake_benchmark(monkeypatch)
    assert main(["benchmark", *argv]) == 0
    assert calls == [["-x"]] and not records_in_tmp.exists()


def test_the_markdown_shows_every_figure_from_the_records():
    clean = a_record(benchmark="claims-heads", uncommitted_changes=False, commit=None, wall_s=275.0,
                     numbers={"ratio": Number(2.3712, "x", "one at a time over side by side")})
    text = records_markdown([a_record(), clean])
    assert text.index("### `claims-heads`") < text.index("### `egtp`")
    assert "- command: `python -m lenscope benchmark egtp --repeats 3`" in text
    assert "- commit: `0123456` + uncommitted changes" in text and "- commit: not a git checkout" in text
    assert "- date: 2026-12-08 10:21 UTC" in text and "- wall time: 1 min 2 s" in text and "4 min 35 s" in text
    assert "AMD EPYC, 2 logical cores, 23.5 GiB memory, no GPU; Python 3.11.7, torch 2.5.1, Linux-6.1" in text
    assert "1-minute load average 1.25 at the start, 2.50 at the end" in text
    for row in ("| bare_forward_ms | 286.1 | ms | a bare forward pass |", "| prompt_tokens | 1,234 | tokens | "
                "tokens \\| of the prompt |", "| same | yes |  | bit for bit |", "| nan | n/a | x | no ratio |",
                "| ratio | 2.371 | x | one at a time over side by side |"):
        assert row in text
    assert "```text\nPLP update + head      0.350 ms   ratio to a decode step 0.0043\n```" in text
    assert records_markdown([]) == "No benchmark has been recorded yet.\n"


def test_values_are_shown_without_e_notation():
    assert [records.format_value(v) for v in (0.00035, 3.96, 1764.3, 100_000.0, 0.0, -2.5, 7)] == [
        "0.0003500", "3.960", "1,764", "100,000", "0", "-2.500", "7"]


def test_every_benchmark_returns_its_figures():
    for path in sorted(BENCHMARKS.glob("bench_*.py")):
        main_def = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)
                        and n.name == "main")
        assert ast.unparse(main_def.returns) == "Numbers", path.name


def test_the_scheduler_benchmark_returns_what_it_prints(capsys):
    from lenscope.benchmarks import bench_scheduler

    numbers = bench_scheduler.main(["--sizes", "100"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert set(numbers) == {f"{k}_100_{f}" for k in bench_scheduler.KEYS.values()
                            for f in ("wall_s", "sim_s_per_wall_s", "requests_per_s")} | {"largest_vs_target"}
    assert last.endswith(f"= {numbers['largest_vs_target'].value:.2f}x the 5 s target")


def test_records_go_to_the_checkout_s_data_unless_told(monkeypatch, records_in_tmp):
    assert records.records_folder() == records_in_tmp
    monkeypatch.delenv(records.RECORDS_ENV)
    assert records.records_folder() == records.SHIPPED_RECORDS == records.settings.APP_ROOT / "data" / "benchmarks"
