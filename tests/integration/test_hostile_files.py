"""Hostile input files through the CLI: each gets one short line naming the file and the limit, exit code 2, no
traceback, and memory stays bounded (checked in a subprocess under an address-space limit)."""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from lenscope.cli import main

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "data" / "traces" / "sharegpt_llama31_8b_300_lengths.csv"
BIG = "1" + "0" * 3999  # a 4,000-digit integer
DEEP = "[" * 200_000 + "]" * 200_000  # JSON nested 200,000 deep


def write_hostile_files(root: Path) -> None:
    """The hostile files of :func:`hostile_cases` under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    files = {
        "wide.csv": ",".join(f"column_{i}" for i in range(400_000)) + "\n" + ",".join(["1"] * 400_000) + "\n",
        "deep.jsonl": '{"arrival": 0, "prompt_tokens": 1, "output_tokens": ' + DEEP + "}\n",
        "big.csv": f"arrival,prompt_tokens,output_tokens\n0,10,{BIG}\n1,10,10\n",
        "big.jsonl": f'{{"timestamp": 0, "input_length": 10, "output_length": {BIG}}}\n',
        "big_pred.csv": f"true_tokens,predicted_tokens\n{BIG},1\n3,4\n",
        "big_pred.jsonl": f'{{"true": 5, "predicted": {BIG}}}\n{{"true": 6, "predicted": 7}}\n',
        "deep.json": DEEP,
        "list.json": "[1, 2]",
        "prompts.jsonl": f'{{"prompt": "hi", "id": {BIG}}}\n',
    }
    for name, text in files.items():
        (root / name).write_text(text)
    if not (root / "fifo.csv").exists():
        os.mkfifo(root / "fifo.csv")
    (root / "folder").mkdir(exist_ok=True)


def hostile_cases(root: Path) -> list[tuple[list[str], list[str]]]:
    """(argv, what its one-line error must say) for each hostile input of :func:`write_hostile_files` in ``root``."""
    fifo, folder = root / "fifo.csv", root / "folder"
    sim = ["simulate", "--first-n", "5", "--trace"]
    cost = ["simulate", "--first-n", "5", "--trace", str(TRACE), "--cost-json"]
    too_wide = ["has 400,000 columns", "'column_0', 'column_1', 'column_2', ... (400,000 columns)", "limit is 1,000"]
    return [
        ([*sim, "/dev/zero"], ["trace file '/dev/zero' is a character device, not a regular file"]),
        ([*sim, str(fifo)], [f"trace file '{fifo}' is a named pipe (FIFO), not a regular file"]),
        ([*sim, str(folder)], [f"trace file '{folder}' is a directory, not a regular file"]),
        ([*sim, str(root / "wide.csv")], [f"trace file '{root / 'wide.csv'}'", *too_wide]),
        ([*sim, str(root / "deep.jsonl")], [f"trace file '{root / 'deep.jsonl'}' line 1 nests JSON 200,001 levels "
                                            "deep; the limit is 32"]),
        ([*sim, str(root / "big.csv")], [f"trace file '{root / 'big.csv'}': malformed trace; column 'output_tokens' "
                                         "needs whole numbers from 1 to 10,000,000: lines 2"]),
        ([*sim, str(root / "big.jsonl")], [f"trace file '{root / 'big.jsonl'}' line 1 holds an integer of 4,000 "
                                           "digits; the limit is 100"]),
        (["evaluate-predictions", "/dev/zero"], ["predictions file '/dev/zero' is a character device"]),
        (["evaluate-predictions", str(folder)], [f"predictions file '{folder}' is a directory"]),
        (["evaluate-predictions", str(root / "wide.csv")], [f"predictions file '{root / 'wide.csv'}'", *too_wide]),
        (["evaluate-predictions", str(root / "big_pred.csv")], [f"predictions file '{root / 'big_pred.csv'}': "
                                                                "malformed predictions file; column 'true_tokens'"]),
        (["evaluate-predictions", str(root / "big_pred.jsonl")], [f"predictions file '{root / 'big_pred.jsonl'}' "
                                                                  "line 1 holds an integer of 4,000 digits"]),
        (["evaluate-predictions", str(root / "deep.jsonl")], ["line 1 nests JSON 200,001 levels deep"]),
        (["simulate", "--first-n", "5", "--trace", str(TRACE), "--predictor", "empirical", "--predictions",
          str(folder)], [f"predictions file '{folder}' is a directory"]),
        (["simulate", "--first-n", "5", "--trace", str(TRACE), "--predictor", "empirical", "--predictions",
          str(root / "big_pred.jsonl")], ["line 1 holds an integer of 4,000 digits"]),
        (["predict", "--predictor", "constant", "--prompts", str(folder)], [f"prompts file '{folder}' is a directory"]),
        (["predict", "--predictor", "constant", "--prompts", "/dev/zero"], ["prompts file '/dev/zero' is a character "
                                                                             "device"]),
        (["predict", "--predictor", "constant", "--prompts", str(root / "prompts.jsonl")],
         ["prompts.jsonl line 1 holds an integer of 4,000 digits; the limit is 100"]),
        ([*cost, str(root / "list.json")], [str(root / "list.json"), "a cost model is an object with prefill and "
                                            "decode objects"]),
        ([*cost, str(root / "deep.json")], [f"cost JSON '{root / 'deep.json'}' nests JSON 200,000 levels deep; the "
                                            "limit is 32"]),
        ([*cost, str(folder)], [f"cost JSON '{folder}' is a directory"]),
        ([*cost, "/dev/zero"], ["cost JSON '/dev/zero' is a character device"]),
        (["calibrate-cost", "--profile", str(folder)], [f"profile CSV '{folder}' is a directory"]),
        (["calibrate-cost", "--profile", str(root / "wide.csv")], [f"profile CSV '{root / 'wide.csv'}'", *too_wide]),
    ]


def check_one_line(command: str, code: int, err: str, expected: list[str]) -> None:
    """Exit code 2 and one short line saying each expected part, no traceback."""
    line = err.strip()
    assert code == 2, (code, err[-2000:])
    assert "\n" not in line and "Traceback" not in line and len(line) < 500, err[-2000:]
    assert line.startswith(f"lenscope {command}: error: "), line
    for part in expected:
        assert part in line, (part, line)


CASES = hostile_cases(Path("files"))  # for the test ids


IDS = [" ".join([argv[0], *[argv[-2]] * argv[-2].startswith("--"), Path(argv[-1]).name]) for argv, _ in CASES]


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_each_hostile_file_gets_one_line_and_exit_2(index, data_dir, tmp_path, capsys):
    write_hostile_files(tmp_path / "files")
    argv, expected = hostile_cases(tmp_path / "files")[index]
    code = main(argv)
    check_one_line(argv[0], code, capsys.readouterr().err, expected)


def test_generations_files_are_bounded(tmp_path):
    from lenscope.jobs.runs.generations import read_generations, read_header

    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"x" * (40 * 2**20)))  # 40 KB that grow to one 40 MB line
    deep = tmp_path / "deep.jsonl.gz"
    deep.write_bytes(gzip.compress((json.dumps({"format": "x"}) + "\n" + DEEP + "\n").encode()))
    for path, message in [(bomb, f"{bomb} line 1 is longer than 16 MB; the limit is 16 MB a line"),
                          (deep, f"{deep} line 2 nests JSON 200,000 levels deep"),
                          (tmp_path, f"generations file '{tmp_path}' is a directory"),
                          ("/dev/zero", "generations file '/dev/zero' is a character device")]:
        with pytest.raises(ValueError) as err:
            read_generations(Path(path))
        assert message in str(err.value) and "\n" not in str(err.value)
    assert read_header(REPO / "data" / "generations" / "sharegpt500-cap1024-seed0.jsonl.gz")["format"]


def _environment(data: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "LENSCOPE_DATA_DIR": str(data), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _address_space(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_dev_zero_as_a_trace_under_a_memory_limit(tmp_path):
    """The CLI itself (``python -m lenscope``) under 4 GB of address space: before, it read /dev/zero until the
    kernel killed it at 23 GB."""
    result = subprocess.run([sys.executable, "-m", "lenscope", "simulate", "--trace", "/dev/zero"], cwd=REPO,
                            env=_environment(tmp_path / "data"), capture_output=True, text=True, timeout=300,
                            preexec_fn=_address_space(4 * 2**30))
    check_one_line("simulate", result.returncode, result.stderr,
                   ["trace file '/dev/zero' is a character device, not a regular file"])


DRIVER = """
import io, json, resource, sys
from contextlib import redirect_stderr
from pathlib import Path
from lenscope.cli import main
from tests.integration.test_hostile_files import hostile_cases, write_hostile_files

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))

def run_all():
    results = []
    for argv, expected in hostile_cases(Path(sys.argv[1])):
        err = io.StringIO()
        with redirect_stderr(err):
            code = main(argv)
        results.append((argv, expected, code, err.getvalue()))
    return results

write_hostile_files(Path(sys.argv[1]))
run_all()  # imports everything once (torch for predict, pandas ...)
try:
    open("/proc/self/clear_refs", "w").write("5")  # resets the peak resident size
    reset = True
except OSError:
    reset = False
rss = status("VmRSS")
limit = status("VmSize") + 2**30  # 1 GB more address space than imports took
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
results = run_all()
print(json.dumps({"results": results, "growth": status("VmHWM") - rss if reset else None}))
"""


def test_every_hostile_file_keeps_memory_bounded(tmp_path):
    """All the cases in one process whose address space may grow by 1 GB at most past its imports; its peak resident
    memory grows by less than 300 MB (the 400,000-column CSV alone took 1.28 GB before)."""
    result = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "files")], cwd=REPO,
                            env=_environment(tmp_path / "data"), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for argv, expected, code, err in report["results"]:
        check_one_line(argv[0], code, err, expected)
    assert report["growth"] is None or report["growth"] < 300 * 2**20, report["growth"]
