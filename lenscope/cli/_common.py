"""Arguments and helpers shared by several CLI commands: the help formatter of every parser, number types, the
``--format``/``--out`` data output, and progress on the terminal (bars) or in a log (one line per phase)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _datetime
import json
import math
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from lenscope.analysis.core.metrics import ci_text
from lenscope.analysis.core.progress import label_phase
from lenscope.models.atomic_files import atomic_path, write_text
from lenscope.models.numbers import NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, SEED, Range

# What a command says when Ctrl-C or `kill` stops it: RESUMES unless its parser sets its own ``interrupt_note``
# (``parser.set_defaults(interrupt_note=...)``), e.g. NOTHING_WRITTEN for one that only writes an output file (each
# written all or nothing: the previous file stays until the new one is whole).
RESUMES = "interrupted; what finished is stored, and the same command resumes"
NOTHING_WRITTEN = "interrupted; nothing was written (a file it writes is as it was before)"
# Each file is written all or nothing, one after another.
PARTLY_WRITTEN = "interrupted; the files written so far are whole, the others as they were: run it again"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The formatter of every lenscope parser (set once, in :class:`lenscope.cli._Parser`): descriptions and helps
    keep their line breaks (each line wrapped to the terminal, an indented line with a hanging indent: one line per
    choice), and each option's help ends with its default, unless the help already says it or there is none to show
    (None, off, empty)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(self._wrapped(text, width, indent))

    def _split_lines(self, text: str, width: int) -> list[str]:
        return self._wrapped(text, width, "")

    @staticmethod
    def _wrapped(text: str, width: int, indent: str) -> list[str]:
        lines = []
        for line in text.splitlines() or [""]:
            body = line.strip()
            if not body:
                lines.append("")
                continue
            lead = indent + " " * (len(line) - len(line.lstrip()))
            lines += textwrap.wrap(" ".join(body.split()), max(width, 20), initial_indent=lead,
                                   break_long_words=False, break_on_hyphens=False,
                                   subsequent_indent=lead + "  " if lead != indent else lead) or [lead]
        return lines

    def _get_help_string(self, action: argparse.Action) -> str:
        help = action.help or ""
        default = action.default
        if ("%(default)" in help or "default" in help.lower() or default is None or default is False
                or default is argparse.SUPPRESS or (isinstance(default, (str, list, tuple)) and not default)):
            return help
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return help
        return f"{help} (default: %(default)s)"


def metrics_line(m: dict) -> str:
    """Static (and dynamic) MAE with 95% CIs and the paired difference to the constant reference, on the
    evaluation split: the CLI's summary of :func:`lenscope.analysis.core.metrics.prediction_metrics`."""
    parts = []
    for key in ("static", "dynamic"):
        if f"{key}_mae" not in m:
            continue
        text = f"{key} MAE {ci_text(m[f'{key}_mae'], m[f'{key}_mae_lo'], m[f'{key}_mae_hi'])}"
        if f"{key}_vs_constant" in m:
            diff = [m[f"{key}_vs_constant{end}"] for end in ("", "_lo", "_hi")]
            text += f" vs constant {m[f'constant_{key}_mae']:.1f}: {ci_text(*diff, signed=True)}"
        parts.append(text)
    return "; ".join(parts) + f" on {m['eval_split']} ({m['n_runs']} runs)"


class Number:
    """argparse type of a number flag: the number in ``valid`` the text spells, else one line naming the flag and
    the range (``argument --temperature: expected a finite number in [0, 10], not 'nan'``), exit 2, before any work.
    With ``many``: comma-separated numbers, each in the range, as a list (an empty text gives an empty list).

    Every numeric flag uses it (a test walks the parser), with the range of the concept it sets."""

    def __init__(self, valid: Range, many: bool = False) -> None:
        self.valid, self.many = valid, many
        self.__name__ = f"number list ({valid.describe()})" if many else valid.describe()

    def __call__(self, text: str):
        try:
            return self.valid.parse_list(text) if self.many else self.valid.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    def __repr__(self) -> str:
        return f"Number({self.valid!r}, many={self.many})"


def number(valid: Range) -> Number:
    """argparse type: one number in ``valid``."""
    return Number(valid)


def numbers(valid: Range) -> Number:
    """argparse type: comma-separated numbers, each in ``valid`` (a list)."""
    return Number(valid, many=True)


positive_int = number(POSITIVE_INT)
non_negative_int = number(NON_NEGATIVE_INT)
positive = number(POSITIVE)  # learning rates, temperatures of pooling, ...
seed = number(SEED)


def output_file(text: str) -> Path:
    """argparse type: a file to write whose folder exists (checked before the work, not after it)."""
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    return path


def _flag(action: argparse.Action) -> str:
    """How the user names ``action``: its longest option string, nothing for a positional argument."""
    return f"{max(action.option_strings, key=len)} " if action.option_strings else ""


def _paths(action: argparse.Action, value) -> list[str | os.PathLike]:
    """The values of ``action`` that may name a file: paths, and free text (``--model``), not choices or numbers."""
    values = value if isinstance(value, (list, tuple)) else [value]
    free_text = action.type is None and action.choices is None
    return [v for v in values if isinstance(v, os.PathLike) or (free_text and isinstance(v, str) and v)]


def _same_file(first: str | os.PathLike, second: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(first, second)  # links and other spellings of one file too
    except (OSError, ValueError):  # one of them does not exist (or is no path): not the same file
        return False


def refuse_a_read_only_store(args: argparse.Namespace) -> None:
    """A command that writes the store (its parser sets ``writes_store=True``) stops on a read-only store at once,
    with one line, before any model loads or training starts."""
    if getattr(args, "writes_store", False):
        from lenscope.store.store import Store

        Store().require_writable(f"`lenscope {args.command}`")


def refuse_output_over_input(command: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """ValueError (before any work) when a file the command writes (an :func:`output_file` argument) is a file
    another of its arguments names: the output would replace the input."""
    actions = [a for a in command._actions if a.dest in vars(args)]
    for out in (a for a in actions if a.type is output_file and getattr(args, a.dest) is not None):
        target = getattr(args, out.dest)
        for other in (a for a in actions if a is not out):
            for value in _paths(other, getattr(args, other.dest)):
                if _same_file(target, value):
                    raise ValueError(f"{_flag(out)}{target} is the input file {_flag(other)}{value}; write the "
                                     "output elsewhere")


def dataset_arg(text: str) -> str:
    """argparse type of every ``--dataset``: a valid dataset name (:func:`lenscope.store.names.dataset_name`)."""
    from lenscope.store.names import dataset_name

    try:
        return dataset_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_dataset_arg(parser: argparse.ArgumentParser, help: str = "dataset name") -> None:
    """``--dataset``, by default the one every page opens on (the full study, else the starter study)."""
    parser.add_argument("--dataset", type=dataset_arg, default=None, help=f"{help} (default: study, else starter)")
    parser.set_defaults(resolve_dataset=True)


def resolve_dataset(args: argparse.Namespace) -> None:
    """Fill in ``args.dataset`` for commands registered with :func:`add_dataset_arg` (a clear error when the
    store holds no dataset)."""
    if getattr(args, "resolve_dataset", False) and args.dataset is None:
        from lenscope.jobs.runs.datasets import preferred_dataset
        from lenscope.store.store import Store

        args.dataset = preferred_dataset(Store().datasets_frame()["name"].tolist())
        if args.dataset is None:
            raise ValueError("the store has no dataset yet; run `python -m lenscope study` (or `collect`) first")


def add_censoring_arg(parser: argparse.ArgumentParser) -> None:
    """``--include-censored``: also train and score on runs cut at the token cap (left out by default)."""
    parser.add_argument("--include-censored", action="store_true",
                        help="also use runs that hit the token cap (their true length is unknown: left out by "
                             "default)")


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--device`` and ``--dtype`` for commands that load a target model."""
    parser.add_argument("--model", default="", help="local checkpoint dir, .gguf file or hub id "
                        "(default: embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="weights' dtype (bfloat16 or float16 on a GPU)")


def add_ray_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--ray [ADDRESS]`` and ``--ray-workers N``: run ``what`` on a Ray cluster (a local one without ADDRESS)."""
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help=f"{what} on a Ray cluster: ray://HOST:10001 or auto to join one, no address to start a "
                             "local cluster (needs: pip install -r requirements-ray.txt)")
    parser.add_argument("--ray-workers", type=positive_int, default=None,
                        help="Ray workers (default: one per GPU of the cluster, else one per CPU slot)")


def ray_options(args: argparse.Namespace):
    """The :class:`~lenscope.jobs.runs.ray_cluster.RayOptions` the Ray arguments ask for (None without ``--ray``)."""
    if args.ray is None:
        return None
    from lenscope.jobs.runs.ray_cluster import RayOptions

    return RayOptions(address=None if args.ray == "local" else args.ray, workers=args.ray_workers)


def load_target(args: argparse.Namespace):
    """Load the target model named by the common model arguments."""
    from lenscope.models.target import TargetModel

    return TargetModel.load(args.model, device=args.device, dtype=args.dtype)


# --- data output: --format and --out ------------------------------------------------------------------------------

FORMATS = ("table", "csv", "json", "parquet")
SUFFIX_FORMATS = {".json": "json", ".parquet": "parquet", ".csv": "csv"}


def add_output_args(parser: argparse.ArgumentParser, table: str, document: str | None = None) -> None:
    """``--format {table,csv,json,parquet}`` and ``--out PATH``: what a command writes besides its text for people.
    ``table`` says what its csv and parquet output hold, ``document`` what its JSON holds (default: the same
    table, as a list of records)."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help=f"table: the text for people; csv or parquet: {table}; json: {document or table} (one "
                             "JSON document); csv, json and parquet go to stdout unless --out is given, and "
                             "everything else the command prints then goes to stderr")
    parser.add_argument("--out", type=output_file, default=None, metavar="PATH",
                        help="write the data to PATH instead (in --format; with --format table, by PATH's suffix: "
                             ".json, .parquet, else CSV); the text for people still goes to stdout")


def data_format(args: argparse.Namespace) -> str | None:
    """The format a command writes its data in (None: only its text for people)."""
    fmt = getattr(args, "format", "table")
    if fmt != "table":
        return fmt
    out = getattr(args, "out", None)
    return None if out is None else SUFFIX_FORMATS.get(Path(out).suffix.lower(), "csv")


def shows_text(args: argparse.Namespace) -> bool:
    """Whether the command prints its text for people on stdout (not when its data goes there)."""
    return getattr(args, "format", "table") == "table" or getattr(args, "out", None) is not None


@contextlib.contextmanager
def command_output(args: argparse.Namespace) -> Iterator[None]:
    """Run a command so that, when its data goes to stdout (``--format csv/json/parquet`` without ``--out``),
    stdout holds the data alone: anything else printed meanwhile (notes, warnings) goes to stderr. Parquet, being
    binary, is refused on a terminal before any work."""
    if shows_text(args):
        yield
        return
    stream = sys.stdout
    if args.format == "parquet" and stream.isatty():
        raise ValueError("parquet is binary: write it to a file with --out PATH (or pipe stdout)")
    args.data_stream = stream
    with contextlib.redirect_stdout(sys.stderr):
        yield


def jsonable(value):
    """``value`` as plain JSON: numpy numbers and arrays, tables (a list of records), timestamps and paths converted;
    NaN and infinities become null."""
    if isinstance(value, pd.DataFrame):
        return [jsonable(r) for r in value.to_dict(orient="records")]
    if isinstance(value, pd.Series):
        return jsonable(value.to_dict())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if value is None or value is pd.NaT or value is pd.NA:
        return None
    if isinstance(value, (pd.Timestamp, _datetime.datetime, _datetime.date)):
        return value.isoformat()
    if isinstance(value, str):
        return value
    return str(value)


def _flat(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` for CSV and Parquet: cells holding dicts or lists become JSON text."""
    out = table.copy()
    for column in out.columns:
        if out[column].map(lambda v: isinstance(v, (dict, list, tuple))).any():
            out[column] = [json.dumps(jsonable(v)) if isinstance(v, (dict, list, tuple)) else v for v in out[column]]
    return out


def write_data(args: argparse.Namespace, table: pd.DataFrame | None = None, document=None,
               what: str = "table") -> None:
    """Write a command's data as ``--format``/``--out`` ask (nothing with the plain text format and no ``--out``):
    csv and parquet write ``table``, json writes ``document`` (default: ``table`` as records). To ``--out`` it
    prints ``{what} -> PATH``; to stdout it writes the data alone."""
    fmt = data_format(args)
    if fmt is None:
        return
    out = getattr(args, "out", None)
    if fmt == "json":
        payload = json.dumps(jsonable(table if document is None else document), indent=2, allow_nan=False) + "\n"
    elif table is None:
        raise ValueError(f"--format {fmt} writes a table; this output is a document: use --format json")
    elif fmt == "csv":
        payload = _flat(table).to_csv(index=False)
    else:
        payload = None
    if out is not None:  # all or nothing: a stopped or failed write leaves the previous file
        if payload is None:
            with atomic_path(out) as temporary:
                _flat(table).to_parquet(temporary, index=False)
        else:
            write_text(out, payload)
        print(f"{what} -> {out}")
        return
    stream = getattr(args, "data_stream", sys.stdout)
    if payload is None:
        stream.flush()
        _flat(table).to_parquet(stream.buffer, index=False)
        stream.buffer.flush()
    else:
        stream.write(payload)
        stream.flush()


# --- progress ------------------------------------------------------------------------------------------------------

BAR_MININTERVAL_S = 0.5  # a bar redraws at most this often (tqdm's own rate limit), however often a job reports
LOG_INTERVAL_S = 30.0  # off a terminal, a long phase prints its count and time left at most this often


class _Nowhere:
    """A file that drops what is written to it: the sink of bars that keep count off a terminal."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def on_terminal(stream=None) -> bool:
    """Whether ``stream`` (default: stderr, where progress goes) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress_bar(total: int, desc: str, initial: int = 0, file=None) -> tqdm:
    """A tqdm bar with lenscope's look; ``initial`` items done before it started do not count in its rate. It
    redraws at most every :data:`BAR_MININTERVAL_S` seconds (feed it with ``update``, not ``refresh``)."""
    return tqdm(total=total, desc=desc, initial=initial, unit="it", dynamic_ncols=True, file=file,
                mininterval=BAR_MININTERVAL_S)


class PhaseBars:
    """``on_progress(done, total, label)`` for lenscope jobs, one phase at a time (a phase is the label without its
    live details, :func:`~lenscope.analysis.core.progress.label_phase`).

    On a terminal: one tqdm bar per phase, its description the latest label (live details such as tokens/s change
    it without restarting the bar's rate and ETA), redrawn at most every :data:`BAR_MININTERVAL_S` seconds. Off a
    terminal (a log, a pipe, CI): no bar is drawn; each phase prints one line when it starts and one when it ends,
    with its count and elapsed time, and in between, at most every :data:`LOG_INTERVAL_S` seconds, its count, the time
    it has run and an estimate of the time left. ``prefix`` goes before every label (``collect dev · sampling``)."""

    def __init__(self, prefix: str = "", terminal: bool | None = None, stream=None) -> None:
        self.stream = stream
        self.terminal = on_terminal(stream) if terminal is None else terminal
        self.prefix = prefix
        self.phase, self.bar, self.started, self.logged = None, None, 0.0, 0.0

    def _label(self, label: str) -> str:
        return f"{self.prefix} · {label}" if self.prefix and label else (self.prefix or label)

    def _line(self, text: str) -> None:
        print(text, file=self.stream if self.stream is not None else sys.stderr, flush=True)

    def __call__(self, done: int, total: int, label: str) -> None:
        label = self._label(label)
        phase = label_phase(label)
        if phase != self.phase:
            self.close()
            self.phase, self.started = phase, time.monotonic()
            self.logged = self.started
            self.bar = progress_bar(total, label, initial=done,
                                    file=(self.stream if self.terminal else _Nowhere()))
            if not self.terminal:
                self._line(f"{phase}: started ({done}/{total})" if total else f"{phase}: started")
        self.bar.set_description(label, refresh=False)
        self.bar.total = total
        self.bar.update(done - self.bar.n)  # redraws only when tqdm's mininterval has passed
        if not self.terminal and time.monotonic() - self.logged >= LOG_INTERVAL_S:
            self._count_line()

    def _count_line(self) -> None:
        """Off a terminal: the phase's count, the time it has run and, at its rate so far, the time left."""
        self.logged = time.monotonic()
        elapsed, done, total = self.logged - self.started, self.bar.n, self.bar.total
        rate = (done - self.bar.initial) / elapsed if elapsed > 0 else 0.0
        left = f", about {tqdm.format_interval((total - done) / rate)} left" if rate > 0 and total else ""
        self._line(f"{self.phase}: {done}/{total} after {tqdm.format_interval(elapsed)}{left}" if total
                   else f"{self.phase}: {done} after {tqdm.format_interval(elapsed)}")

    def __enter__(self) -> PhaseBars:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the current phase: its last count drawn (terminal) or its end line printed (elsewhere)."""
        if self.bar is None:
            return
        if not self.terminal:
            elapsed = time.monotonic() - self.started
            count = f" {self.bar.n}/{self.bar.total}" if self.bar.total else ""
            self._line(f"{self.phase}: done{count} in {elapsed:.1f} s")
        else:
            self.bar.refresh()  # the last count, whatever the rate limit skipped
        self.bar.close()
        self.phase, self.bar = None, None
