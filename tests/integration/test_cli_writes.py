"""Files the CLI writes for a user: an ``--out`` that is one of the command's inputs is refused before any work, a
write stopped or failed midway leaves the previous file whole, and a stopped command says truly what was kept."""

from __future__ import annotations

import errno
import io
import os

import pandas as pd
import pytest

from lenscope.cli import main
from lenscope.cli._common import NOTHING_WRITTEN

PREDICTIONS = "true_tokens,predicted_tokens\n" + "".join(f"{10 + i * 5},{12 + i * 5}\n" for i in range(30))


@pytest.fixture
def inputs(tmp_path):
    """One input file of each command under test: predictions, a trace, prompts."""
    files = {"preds.csv": PREDICTIONS, "trace.csv": "arrival,prompt_tokens,output_tokens\n0.0,8,120\n0.5,9,80\n",
             "prompts.txt": "how long is a piece of string?\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _refused(capsys, command: str, out, flag: str, given) -> None:
    err = capsys.readouterr().err
    assert err.strip() == (f"lenscope {command}: error: --out {out} is the input file {flag}{given}; write the "
                           "output elsewhere"), err


@pytest.mark.parametrize("command, flag, name", [("evaluate-predictions", "", "preds.csv"),
                                                 ("simulate", "--trace ", "trace.csv"),
                                                 ("predict", "--prompts ", "prompts.txt")])
def test_an_out_that_is_the_input_file_is_refused_before_any_work(data_dir, inputs, capsys, command, flag, name):
    given = inputs / name
    before = given.read_bytes()
    argv = [command, *([flag.strip()] if flag else []), str(given)]
    assert main([*argv, "--out", str(given)]) == 2
    _refused(capsys, command, given, flag, given)
    link = inputs / "link.csv"
    link.symlink_to(given)  # another name of the same file
    assert main([*argv, "--out", str(link)]) == 2
    _refused(capsys, command, link, flag, given)
    assert given.read_bytes() == before and not data_dir.exists()  # nothing read, written or stored


def test_a_hard_link_of_the_input_is_refused_and_a_file_beside_it_written(data_dir, inputs, capsys):
    given, link, out = inputs / "preds.csv", inputs / "hard-link.csv", inputs / "confusion.csv"
    os.link(given, link)
    assert main(["evaluate-predictions", str(given), "--out", str(link)]) == 2
    _refused(capsys, "evaluate-predictions", link, "", given)
    assert given.read_text() == PREDICTIONS
    assert main(["evaluate-predictions", str(given), "--out", str(out)]) == 0
    assert "true length" in pd.read_csv(out).columns and given.read_text() == PREDICTIONS


def test_a_stopped_write_of_out_keeps_the_previous_file_and_says_nothing_was_written(store, tmp_path, capsys,
                                                                                      monkeypatch):
    out = tmp_path / "datasets.parquet"
    out.write_bytes(b"the previous good file")

    def killed(frame, path, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"PAR1" + b"\0" * 19)  # 23 bytes of a Parquet file, then the kill
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", killed)
    assert main(["datasets", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip() == f"lenscope datasets: {NOTHING_WRITTEN}"
    assert out.read_bytes() == b"the previous good file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["datasets.parquet", "lenscope-data"]


def test_a_full_disk_while_writing_out_keeps_the_previous_file_and_says_where(data_dir, inputs, capsys,
                                                                              monkeypatch):
    out = inputs / "confusion.csv"
    out.write_text("a,b\n1,2\n")

    class Full(io.StringIO):
        """The file being written: half of the text fits on the disk (a row cut short), then it is full."""

        def __init__(self, path, mode, **kwargs) -> None:
            super().__init__()
            self.handle = open(path, mode, **kwargs)

        def write(self, text: str) -> int:
            self.handle.write(text[: len(text) // 2])
            self.handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self) -> None:
            self.handle.close()
            super().close()

    monkeypatch.setattr("lenscope.models.atomic_files.open", Full, raising=False)
    assert main(["evaluate-predictions", str(inputs / "preds.csv"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"the disk holding {inputs} is full (writing {out})" in err and "Traceback" not in err
    assert out.read_text() == "a,b\n1,2\n"
    assert not [p for p in inputs.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("argv", [["datasets"], ["report", "--dataset", "any"], ["evaluate-predictions", "p.csv"],
                                  ["calibrate-cost", "--profile", "p.csv"]])
def test_a_stopped_command_that_only_writes_says_nothing_was_written(data_dir, capsys, monkeypatch, argv):
    from lenscope.cli import build_parser, command_parser

    def stopped(args):
        raise KeyboardInterrupt

    func = command_parser(build_parser(), argv[0]).get_default("func")
    monkeypatch.setattr(f"{func.__module__}.{func.__name__}", stopped)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.strip() == f"lenscope {argv[0]}: {NOTHING_WRITTEN}" and "Traceback" not in err
