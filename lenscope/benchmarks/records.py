"""Benchmark records: what a benchmark measured, as a small JSON file that the benchmarks page renders.

``python -m lenscope benchmark NAME [ARGS...]`` runs ``bench_NAME.main(argv)``, which prints its lines and returns
its figures as :class:`Number`\\ s; :func:`record_run` times it, keeps its last printed line and reads the commit and
the machine, and :func:`write_record` writes the :class:`Record` to ``<folder>/NAME.json`` (:func:`records_folder`:
``data/benchmarks/`` of a checkout, where it is committed with the code that measured it). A benchmark that fails or
is interrupted returns nothing, so nothing is written. :func:`read_records` reads a folder back (validating every
file) and :func:`records_markdown` renders them for the docs, every figure from its record.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lenscope.figures.markdown import cell
from lenscope.models.atomic_files import is_temporary, write_text
from lenscope.store import settings

SCHEMA = 1
RECORDS_ENV = "LENSCOPE_BENCHMARK_RECORDS"  # a folder that replaces the default one (tests, CI)
#: The records that ship: ``data/benchmarks`` of a checkout, bundled (read-only) in a wheel.
SHIPPED_RECORDS = settings.SHIPPED_DATA / "benchmarks"
Value = int | float | bool | None  # None: not a number (NaN or infinite), shown as n/a


class RecordError(ValueError):
    """A benchmark record file that cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Number:
    """One figure of a benchmark: its value, its unit (``s``, ``tokens/s``, ``x``; empty for a count) and what it is.
    A numpy or torch scalar becomes a Python number, a float keeps six significant digits (more is noise), and NaN or
    an infinity becomes None."""

    value: Value
    unit: str
    what: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _plain(self.value))


Numbers = dict[str, Number]


def _plain(value: Any) -> Value:
    if value is None or isinstance(value, bool):
        return value
    if hasattr(value, "item"):  # a numpy or torch scalar
        value = value.item()
    if isinstance(value, bool | int):
        return value
    value = float(value)
    return float(f"{value:.6g}") if math.isfinite(value) else None


@dataclass(frozen=True)
class Machine:
    """What ran a benchmark: CPU model, logical cores, memory (GiB), GPU (None: none), Python, torch and OS versions,
    and the 1-minute load average at the start and the end (others may have shared the cores)."""

    cpu: str
    cores: int
    memory_gib: float | None
    gpu: str | None
    python: str
    torch: str | None
    os: str
    load_start: float | None
    load_end: float | None


@dataclass(frozen=True)
class Record:
    """One run of a benchmark: which (``benchmark``, ``what`` it measures in a line), the exact ``command``, the
    checkout's ``commit`` (full hash; None outside a git checkout) and whether tracked files had
    ``uncommitted_changes``, the UTC ``date`` it started, the ``machine``, ``wall_s``, its ``numbers`` and the
    ``last_line`` it printed."""

    benchmark: str
    what: str
    command: str
    commit: str | None
    uncommitted_changes: bool
    date: str
    machine: Machine
    wall_s: float
    numbers: Numbers
    last_line: str
    schema: int = SCHEMA

    def to_json(self) -> str:
        """Pretty JSON (the file's text)."""
        return json.dumps({"schema": self.schema, **{k: v for k, v in asdict(self).items() if k != "schema"}},
                          indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------------------------- running and writing

def command_line(name: str, argv: list[str]) -> str:
    """The command that runs benchmark ``name`` with ``argv``, quoted as a shell would need it."""
    return shlex.join(["python", "-m", "lenscope", "benchmark", name, *argv])


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line (what a benchmark measures)."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s", paragraph.replace("``", "`"), maxsplit=1)[0]


def checkout_commit(root: Path = settings.APP_ROOT) -> tuple[str | None, bool]:
    """The full hash of ``root``'s git HEAD and whether its tracked files have uncommitted changes; (None, False)
    outside a git checkout (an installed wheel) or without git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None, False


def _load() -> float | None:
    with contextlib.suppress(OSError, AttributeError):
        return round(os.getloadavg()[0], 2)
    return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def _memory_gib() -> float | None:
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return None


def machine(load_start: float | None, load_end: float | None) -> Machine:
    """This machine, with the load averages given (read them with :func:`os.getloadavg` around the run)."""
    try:
        import torch
    except ImportError:
        torch = None
    gpu = torch.cuda.get_device_name(0) if torch is not None and torch.cuda.is_available() else None
    return Machine(cpu=_cpu_model(), cores=os.cpu_count() or 0, memory_gib=_memory_gib(), gpu=gpu,
                   python=platform.python_version(), torch=None if torch is None else str(torch.__version__),
                   os=platform.platform(), load_start=load_start, load_end=load_end)


class _Tail:
    """A text stream that passes everything to ``stream`` and keeps the last ``keep`` characters written."""

    def __init__(self, stream, keep: int = 65_536) -> None:
        self.stream, self.keep, self.text = stream, keep, ""

    def write(self, text: str) -> int:
        self.text = (self.text + text)[-self.keep:]
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)

    def last_line(self) -> str:
        return next((line.rstrip() for line in reversed(self.text.splitlines()) if line.strip()), "")


def record_run(name: str, main: Callable[[list[str]], Mapping[str, Number] | None], argv: list[str],
               what: str = "") -> Record:
    """Run ``main(argv)`` (a benchmark's, printing as usual) and return its record: the figures it returned, its
    wall time, its last printed line, the commit and the machine. What ``main`` raises (a failure, an interrupt, a
    ``SystemExit``) propagates, and there is no record."""
    commit, dirty = checkout_commit()
    date = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    load_start, tail = _load(), _Tail(sys.stdout)
    began = time.perf_counter()
    with contextlib.redirect_stdout(tail):
        numbers = main(argv) or {}
    wall = time.perf_counter() - began
    bad = [k for k, v in numbers.items() if not isinstance(v, Number)]
    if bad:
        raise TypeError(f"benchmark {name} returned figures that are not a Number: {', '.join(bad)}")
    return Record(benchmark=name, what=what, command=command_line(name, argv), commit=commit, uncommitted_changes=dirty,
                  date=date, machine=machine(load_start, _load()), wall_s=round(wall, 3), numbers=dict(numbers),
                  last_line=tail.last_line())


def records_folder() -> Path:
    """Where records go: ``$LENSCOPE_BENCHMARK_RECORDS`` when set; else :data:`SHIPPED_RECORDS` in a checkout
    (committed with the code that measured them); else, for an installed copy (whose bundled data is read-only),
    ``benchmarks`` in the user's data dir."""
    configured = os.environ.get(RECORDS_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return SHIPPED_RECORDS if settings.CHECKOUT else settings.data_dir() / "benchmarks"


def record_path(folder: Path, name: str) -> Path:
    return Path(folder) / f"{name}.json"


def write_record(record: Record, folder: Path | None = None) -> Path:
    """Write ``record`` atomically as ``<folder>/<benchmark>.json`` (default :func:`records_folder`), replacing that
    benchmark's previous record; returns the path."""
    path = record_path(records_folder() if folder is None else folder, record.benchmark)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, record.to_json())
    return path


# ---------------------------------------------------------------------------------------------- reading

_NUMBER = (int, float)
_RECORD_FIELDS = {"schema": int, "benchmark": str, "what": str, "command": str, "commit": (str, type(None)),
                  "uncommitted_changes": bool, "date": str, "machine": dict, "wall_s": _NUMBER, "numbers": dict,
                  "last_line": str}
_MACHINE_FIELDS = {"cpu": str, "cores": int, "memory_gib": (*_NUMBER, type(None)), "gpu": (str, type(None)),
                   "python": str, "torch": (str, type(None)), "os": str, "load_start": (*_NUMBER, type(None)),
                   "load_end": (*_NUMBER, type(None))}
_NUMBER_FIELDS = {"value": (bool, *_NUMBER, type(None)), "unit": str, "what": str}


def _fields(data: Any, spec: dict[str, type | tuple[type, ...]], where: str) -> dict[str, Any]:
    """``data``'s fields of ``spec``, each checked for its type (a bool is no number unless ``bool`` is named)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is {type(data).__name__}, not an object")
    missing = [k for k in spec if k not in data]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    for key, kind in spec.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        value = data[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise ValueError(f"{where}: {key} is {json.dumps(value)[:60]}, not {names}")
    return {k: data[k] for k in spec}


def parse_record(text: str, source: str) -> Record:
    """A record from its JSON text, validated; :class:`RecordError` naming ``source`` says what is wrong."""
    try:
        data = _fields(json.loads(text), _RECORD_FIELDS, "the record")
        if data["schema"] != SCHEMA:
            raise ValueError(f"schema {data['schema']} is not {SCHEMA}, the one this lenscope reads")
        datetime.fromisoformat(data["date"].replace("Z", "+00:00"))
        data["machine"] = Machine(**_fields(data["machine"], _MACHINE_FIELDS, "machine"))
        data["numbers"] = {name: Number(**_fields(n, _NUMBER_FIELDS, f"number {name}"))
                           for name, n in data["numbers"].items()}
        return Record(**data)
    except ValueError as exc:  # json.JSONDecodeError and a bad date are ValueErrors too
        raise RecordError(f"benchmark record {source} is malformed: {exc}") from exc


def read_record(path: Path) -> Record:
    """The record in ``path``; its benchmark must be the one the file is named after."""
    record = parse_record(Path(path).read_text(encoding="utf-8"), str(path))
    if record.benchmark != Path(path).stem:
        raise RecordError(f"benchmark record {path} is malformed: it records benchmark {record.benchmark!r}, "
                          f"not {Path(path).stem!r} as its name says")
    return record


def read_records(folder: Path | None = None) -> list[Record]:
    """Every record of ``folder`` (default :func:`records_folder`), by benchmark name; none when it is missing."""
    folder = records_folder() if folder is None else Path(folder)
    if not folder.is_dir():
        return []
    return [read_record(p) for p in sorted(folder.glob("*.json")) if not is_temporary(p)]


# ---------------------------------------------------------------------------------------------- rendering

def format_value(value: Value) -> str:
    """A figure as the page shows it: about four significant digits, thousands separated, never in e-notation."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    digits = 3 - math.floor(math.log10(abs(value))) if value else 0
    return f"{value:,.{max(digits, 0)}f}"


def duration(seconds: float) -> str:
    """``12.3 s``, ``4 min 41 s`` or ``1 h 07 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = int(seconds // 60)
    return f"{minutes} min {seconds % 60:.0f} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def machine_text(m: Machine) -> str:
    """The machine in one line."""
    memory = "" if m.memory_gib is None else f", {m.memory_gib:g} GiB memory"
    torch = "" if m.torch is None else f", torch {m.torch}"
    load = ", ".join(f"{'n/a' if v is None else f'{v:.2f}'} at the {when}"
                     for v, when in ((m.load_start, "start"), (m.load_end, "end")))
    return (f"{m.cpu}, {m.cores} logical cores{memory}, {m.gpu or 'no GPU'}; Python {m.python}{torch}, {m.os}; "
            f"1-minute load average {load}")


def record_markdown(record: Record, level: int = 3) -> str:
    """One benchmark's section: what it measures, the command, commit, date, machine, its figures, its last line."""
    commit = "not a git checkout" if record.commit is None else f"`{record.commit[:7]}`" + (
        " + uncommitted changes" if record.uncommitted_changes else "")
    date = datetime.fromisoformat(record.date.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"{'#' * level} `{record.benchmark}`", ""]
    if record.what:
        lines += [record.what, ""]
    lines += [f"- command: `{record.command}`", f"- commit: {commit}", f"- date: {date}",
              f"- machine: {machine_text(record.machine)}", f"- wall time: {duration(record.wall_s)}", ""]
    if record.numbers:
        lines += ["| figure | value | unit | what |", "|---|---:|---|---|"]
        lines += [f"| {cell(name)} | {format_value(n.value)} | {cell(n.unit)} | {cell(n.what)} |"
                  for name, n in record.numbers.items()]
        lines.append("")
    lines += ["Last line:", "", "```text", record.last_line, "```"]
    return "\n".join(lines)


def records_markdown(records: list[Record], level: int = 3) -> str:
    """Markdown of every record, a section each (``level``: their heading level), by benchmark name."""
    if not records:
        return "No benchmark has been recorded yet.\n"
    return "\n\n".join(record_markdown(r, level) for r in sorted(records, key=lambda r: r.benchmark)) + "\n"
