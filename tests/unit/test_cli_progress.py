"""Progress on the command line: on a terminal, bars that redraw at tqdm's rate limit however often a job reports; in a
log (not a terminal), no bar but one line when each phase starts and one when it ends, with its elapsed time."""

from __future__ import annotations

import io
import re

from lenscope.cli._common import BAR_MININTERVAL_S, PhaseBars, on_terminal


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _report(bars: PhaseBars, n: int = 2000) -> None:
    for done in range(1, n + 1):
        bars(done, n, f"sampling | {done} tok/s")
    for done in range(1, 101):
        bars(done, 100, "training")
    bars.close()


def test_off_a_terminal_each_phase_is_one_start_and_one_end_line(capsys):
    assert not on_terminal()  # capsys' stderr is not a terminal: what a log or CI sees
    bars = PhaseBars(prefix="collect dev")
    _report(bars)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == ""
    assert len(lines) == 4, lines
    assert lines[0] == "collect dev · sampling: started (1/2000)"
    assert re.fullmatch(r"collect dev · sampling: done 2000/2000 in \d+\.\d s", lines[1]), lines[1]
    assert lines[2] == "collect dev · training: started (1/100)"
    assert re.fullmatch(r"collect dev · training: done 100/100 in \d+\.\d s", lines[3]), lines[3]
    assert "\r" not in captured.err and "it/s" not in captured.err and "|" not in captured.err


def test_on_a_terminal_bars_redraw_at_the_rate_limit_not_on_every_report():
    stream = Terminal()
    bars = PhaseBars(stream=stream)
    assert bars.terminal
    bars(0, 2000, "sampling")
    assert bars.bar.mininterval == BAR_MININTERVAL_S
    _report(bars)
    redraws = stream.getvalue().count("\r")
    assert 2 <= redraws < 40, redraws  # 2,100 reports in well under a second: a few redraws, not 2,100
    assert "2000/2000" in stream.getvalue() and "100/100" in stream.getvalue()  # the last count is drawn on close
    assert "started" not in stream.getvalue()


def test_a_command_in_a_log_prints_phase_lines_not_bars(data_dir, tmp_path, capsys):
    from lenscope.cli import main

    trace = tmp_path / "trace.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.1},{10 + i},{5 + i % 7}\n"
                                                                       for i in range(30)))
    assert main(["simulate", "--trace", str(trace)]) == 0
    captured = capsys.readouterr()
    assert "e2e P50/P90/P99" in captured.out
    err = [line for line in captured.err.splitlines() if line.strip()]
    phase_line = re.compile(r": (started( \(\d+/\d+\))?|done( \d+/\d+)? in \d+\.\d s)$")
    assert err and all(phase_line.search(line) for line in err), err
    assert "\r" not in captured.err
