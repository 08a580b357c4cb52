"""Bounded reading of a user's files: regular files only, bytes, lines, CSV columns and rows, JSON nesting and
integer digits, each refusal one short line naming the file and the limit."""

from __future__ import annotations

import gzip
import json
import os
import threading

import numpy as np
import pytest

from lenscope.analysis.core import safe_files
from lenscope.analysis.core.safe_files import (
    MAX_COLUMNS,
    MIN_DISK_BYTES,
    LimitError,
    bounded_lines,
    check_csv_header,
    check_lines,
    column_list,
    disk_limit,
    json_depth,
    load_json,
    load_json_file,
    read_bounded,
    read_csv_bounded,
    read_csv_file,
    regular_file,
)

MB = 2**20


def one_line(exc: pytest.ExceptionInfo, *parts: str, longest: int = 300) -> str:
    message = str(exc.value)
    assert "\n" not in message and len(message) < longest, message
    for part in parts:
        assert part in message, (part, message)
    return message


def test_only_regular_files_are_files(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a\n")
    assert regular_file(path) == path
    assert regular_file(str(path), "trace file") == path
    for target, kind in [(tmp_path, "is a directory"), ("/dev/zero", "is a character device"),
                         (tmp_path / "nope.csv", "does not exist"), (path / "below", "does not exist")]:
        with pytest.raises(LimitError) as err:
            regular_file(target, "trace file")
        one_line(err, "trace file", str(target), kind)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(LimitError) as err:  # refused without opening it (which would wait for a writer)
        regular_file(fifo, "predictions file")
    one_line(err, "named pipe (FIFO), not a regular file", "save what it streams to a file first")


def test_reads_stop_one_byte_past_the_limit_whatever_st_size_says(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"x" * 1000)
    assert read_bounded(path, 1000) == b"x" * 1000
    with pytest.raises(LimitError) as err:
        read_bounded(path, 999, "trace file 't.csv'")
    one_line(err, "trace file 't.csv' is 1,000 bytes; the limit is 999 bytes")
    sparse = tmp_path / "sparse.csv"
    with open(sparse, "wb") as fh:
        fh.truncate(64 * 2**30)  # 64 GB of nothing: refused by its size, before a byte is read
    with pytest.raises(LimitError) as err:
        read_bounded(sparse, MB)
    one_line(err, "is 65,536 MB; the limit is 1.0 MB")
    with pytest.raises(LimitError) as err:  # a device says 0 bytes and never ends
        read_bounded("/dev/zero", MB, why=" (a reason)")
    one_line(err, "file '/dev/zero' holds more than 1.0 MB; the limit is 1.0 MB (a reason)")
    with pytest.raises(LimitError, match="is a directory"):
        read_bounded(tmp_path, MB)


def _write_fifo(path, data: bytes) -> threading.Thread:
    def write():
        try:
            with open(path, "wb") as fh:
                fh.write(data)
        except BrokenPipeError:  # the reader stopped at its limit
            pass

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_pipe_is_read_within_the_limit_too(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = _write_fifo(fifo, b"a,b\n1,2\n")
    assert read_bounded(fifo, MB) == b"a,b\n1,2\n"
    writer.join(10)
    writer = _write_fifo(fifo, b"y" * (3 * MB))
    with pytest.raises(LimitError, match="holds more than 1.0 MB"):
        read_bounded(fifo, MB)
    writer.join(10)


def test_gzip_is_bounded_after_decompression(tmp_path):
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (20 * MB)))  # 20 KB that grow to 20 MB
    assert bomb.stat().st_size < MB
    with pytest.raises(LimitError) as err:
        read_bounded(bomb, MB, gzip=True)
    one_line(err, "holds more than 1.0 MB uncompressed; the limit is 1.0 MB")
    with pytest.raises(LimitError, match="line 1 is longer than 1.0 MB"):
        list(bounded_lines(bomb, 100 * MB, gzip=True, max_line=MB))
    lines = tmp_path / "lines.gz"
    lines.write_bytes(gzip.compress(b"a\n" * 1000))
    assert [n for n, _ in bounded_lines(lines, MB, gzip=True)][-1] == 1000
    with pytest.raises(LimitError, match="holds more than 1,000 bytes uncompressed"):
        list(bounded_lines(lines, 1000, gzip=True))
    not_gzip = tmp_path / "plain.gz"
    not_gzip.write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="is not a readable gzip file"):
        read_bounded(not_gzip, MB, gzip=True)


@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_long_lines_are_found_across_chunks(monkeypatch, chunk):
    monkeypatch.setattr(safe_files, "_CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    for _ in range(200):
        lines = [b"x" * int(n) for n in rng.integers(0, 12, size=int(rng.integers(1, 8)))]
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        first_long = next((k + 1 for k, line in enumerate(lines) if len(line) > 5), None)
        if first_long is None:
            check_lines(data, "f", max_line=5)
        else:
            with pytest.raises(LimitError, match=rf"^f line {first_long} is longer than"):
                check_lines(data, "f", max_line=5)


def test_wide_csv_headers_are_refused_with_a_few_names():
    header = ",".join(f"column_{i}" for i in range(400_000)).encode()
    with pytest.raises(LimitError) as err:
        check_csv_header(header + b"\n1\n", "trace file 'w.csv'")
    one_line(err, "trace file 'w.csv' has 400,000 columns ['column_0', 'column_1', 'column_2', ... (400,000 "
             "columns)]; the limit is 1,000", longest=200)
    at_limit = ",".join(["c"] * MAX_COLUMNS).encode()
    check_csv_header(at_limit + b"\n", "f")
    quoted = ('"' + "," * 5000 + '",b\n').encode()  # separators inside a quoted name are no columns
    check_csv_header(quoted, "f")
    assert column_list(["t", "in"]) == "['t', 'in']"
    assert column_list(["x" * 100] + list("abcdefghijk"), shown=2, width=5) == "['xxxxx...', 'a', ... (12 columns)]"
    assert column_list(["id", "text"], quote=False) == "id, text"


def test_csv_reads_are_bounded_and_their_errors_one_line():
    data = b"a,b\n" + b"1,2\n" * 5
    assert len(read_csv_bounded(data, "f", max_rows=5)) == 5
    with pytest.raises(LimitError) as err:
        read_csv_bounded(data, "trace file 'x.csv'", max_rows=4)
    one_line(err, "trace file 'x.csv' has more than 4 rows; the limit is 4")
    with pytest.raises(ValueError) as err:
        read_csv_bounded(b"a,b\n1,2\n1,2,3," + b"4," * 100_000 + b"\n", "f")
    one_line(err, "f is not a readable CSV file: Error tokenizing data")
    with pytest.raises(LimitError, match="f line 2 is longer than"):
        read_csv_bounded(b"a\n" + b"1" * 2000 + b"\n", "f", max_line=1000)


def test_json_nesting_is_counted_before_parsing():
    assert json_depth('{"a": [1, {"b": []}]}') == 4
    assert json_depth('{"a": "[[[[{{{{", "b": "\\"[[[["}') == 1  # brackets in strings (escaped quotes too)
    assert json_depth(b"[]") == 1 and json_depth("7") == 0
    deep = "[" * 200_000 + "]" * 200_000
    assert json_depth(deep) == 200_000
    with pytest.raises(LimitError) as err:
        load_json(deep, "cost JSON 'c.json'")
    one_line(err, "cost JSON 'c.json' nests JSON 200,000 levels deep; the limit is 32")
    assert load_json("[" * 32 + "]" * 32, "f") is not None
    with pytest.raises(LimitError):
        load_json("[" * 33 + "]" * 33, "f")


@pytest.mark.parametrize("digits", [4_000, 5_000])  # 5,000: over Python's own limit of 4,300 too
def test_long_integers_are_refused(digits):
    for text in (f'{{"n": {"1" * digits}}}', f"[-{'9' * digits}]".encode()):
        with pytest.raises(LimitError) as err:
            load_json(text, "trace file 't.jsonl' line 1")
        one_line(err, f"trace file 't.jsonl' line 1 holds an integer of {digits:,} digits; the limit is 100")
    assert load_json(f'{{"id": "{"1" * digits}", "n": {"2" * 100}}}', "f") == {"id": "1" * digits, "n": int("2" * 100)}
    assert load_json(f"[1.{'5' * digits}]", "f") == [1.5555555555555556]  # a float is a float, however long
    with pytest.raises(json.JSONDecodeError):
        load_json("{oops", "f")


def test_whole_files(tmp_path):
    good = tmp_path / "c.json"
    good.write_text('{"a": 1}')
    assert load_json_file(good, MB, "cost JSON") == {"a": 1}
    for text, message in [("[" * 100 + "]" * 100, "nests JSON 100 levels deep"), ("{oops", "is not valid JSON"),
                          ("x" * 2000, "is 2,000 bytes; the limit is 1,000 bytes")]:
        good.write_text(text)
        with pytest.raises(ValueError) as err:
            load_json_file(good, 1000, "cost JSON")
        one_line(err, f"cost JSON '{good}'", message)
    with pytest.raises(LimitError, match="cost JSON '.*' is a directory"):
        load_json_file(tmp_path, MB, "cost JSON")
    table = tmp_path / "p.csv"
    table.write_text("a,b\n1,2\n")
    assert read_csv_file(table).to_dict("list") == {"a": [1], "b": [2]}
    with pytest.raises(LimitError, match="profile CSV '/dev/zero' is a character device"):
        read_csv_file("/dev/zero", "profile CSV")


def test_files_from_disk_get_a_share_of_the_memory_left(monkeypatch):
    monkeypatch.setattr(safe_files, "memory_available", lambda: 64 * 2**30)
    limit, why = disk_limit()
    assert limit == 2 * 2**30 and "1/32 of the 65,536 MB of memory available" in why
    monkeypatch.setattr(safe_files, "memory_available", lambda: 256 * MB)
    assert disk_limit() == (MIN_DISK_BYTES, "")  # never below the upload limit
    monkeypatch.setattr(safe_files, "memory_available", lambda: None)
    assert disk_limit()[0] == safe_files.UNKNOWN_MEMORY // 32
    monkeypatch.undo()
    available = safe_files.memory_available()
    assert available is None or available > 0
