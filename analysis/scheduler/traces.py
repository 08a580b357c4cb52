"""Request traces for the scheduler simulator: importers, validation, re-timing and filters.

:func:`load_trace_file` is the one way to read a trace file: a CSV or JSON-lines table (told apart by its
first byte; a JSON object spread over several lines reads too) in a known format (:data:`FORMATS`, detected from
its columns), a serving benchmark's result (vLLM ``benchmark_serving.py --save-result`` / ``vllm bench serve``, SGLang
``bench_serving --output-file``: per-request arrays in one JSON object per run, see :func:`benchmark_requests`), or
read through a user's :class:`TraceFormat` (a column mapping). Every importer returns a frame with columns
``arrival_s`` (seconds from the first request), ``prompt_tokens``, ``output_tokens``, ``hash_ids`` (tuples of prompt
block hashes) and ``predicted_tokens`` (an external predictor's output lengths, from a column of that name or a
mapped one) for traces that carry them, and ``run_id`` for traces built from the app's own runs, sorted by arrival.
Malformed input raises ``ValueError`` naming the offending file lines; rows an importer leaves out on purpose
(BurstGPT's and the benchmarks' failed requests) are counted in ``frame.attrs["notes"]``, which also says how a
benchmark result's arrivals were derived.
"""

from __future__ import annotations

import hashlib
import io
import math
import numbers
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from lenscope.analysis.core.safe_files import (
    MAX_COLUMNS,
    MAX_LINE_BYTES,
    LimitError,
    check_csv_header,
    check_lines,
    column_list,
    disk_limit,
    label,
    load_json,
    read_bounded,
    read_csv_bounded,
    regular_file,
)

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
MAX_ROWS = 200_000
# Bounds that keep simulated clocks and token counts exact in float64 / int64: a year of arrivals, and ten
# million tokens per request (far beyond any context window).
MAX_ARRIVAL_S = 365 * 24 * 3600.0
MAX_TOKENS = 10_000_000
TRACE_COLUMNS = ["arrival_s", "prompt_tokens", "output_tokens"]
# Seconds per arrival unit; "datetime" reads timestamps such as 2023-11-16 18:15:46.68 (naive ones as UTC).
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "datetime": None}
MAPPING_KEYS = ("arrival", "prompt", "output", "hash_ids", "predicted")
PREDICTED_COLUMN = "predicted_tokens"  # a trace's own predicted output lengths, read whenever present
# How requests are drawn from a pool (:func:`draw_requests`): each equally likely, or each in proportion to its
# output length (the request of a uniformly drawn output token), which makes a workload more decode-bound.
WORKLOADS = ("uniform", "decode-bound")
Source = str | Path | bytes | BinaryIO


@dataclass(frozen=True)
class TraceFormat:
    """The columns holding a request's arrival, prompt tokens and output tokens, the arrival unit, the
    optional column of prompt block hashes, whether rows with 0 output tokens are failed requests to leave
    out (counted in a note) rather than errors, and the column of predicted output lengths (``predicted_tokens``
    when None, read only if present)."""

    arrival: str
    prompt: str
    output: str
    time_unit: str = "s"
    hash_ids: str | None = None
    drop_failed: bool = False
    predicted: str | None = None

    def __post_init__(self) -> None:
        if self.time_unit not in TIME_UNITS:
            raise ValueError(f"time unit must be one of {', '.join(TIME_UNITS)}, not {self.time_unit!r}")


FORMATS = {
    # Azure LLM inference traces 2023 (Splitwise) and 2024 (DynamoLLM; timestamps with a UTC offset).
    "azure": TraceFormat("TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime"),
    # Mooncake (FAST'25) JSON lines: arrival in ms, hash_ids = hashes of the prompt's KV blocks.
    "mooncake": TraceFormat("timestamp", "input_length", "output_length", "ms", hash_ids="hash_ids"),
    # BurstGPT: Timestamp (s), Model, Request tokens, Response tokens, Total tokens, Log Type; failed
    # requests have 0 response tokens.
    "burstgpt": TraceFormat("Timestamp", "Request tokens", "Response tokens", "s", drop_failed=True),
    "llmservingsim": TraceFormat("arrival_time_ns", "input_toks", "output_toks", "ns"),
    # Vidur's request traces (data/processed_traces/*.csv): arrival in seconds, prefill and decode tokens.
    "vidur": TraceFormat("arrived_at", "num_prefill_tokens", "num_decode_tokens", "s"),
    "generic": TraceFormat("arrival", "prompt_tokens", "output_tokens"),
}


# A serving benchmark's result: one JSON object per run (vLLM: one JSON file; SGLang: one JSON line appended per run)
# holding per-request arrays, read by :func:`benchmark_requests` into the raw columns of this format. Failed requests
# have output length 0 there and are left out (counted in a note).
BENCHMARK = "benchmark"
BENCHMARK_KEYS = ("input_lens", "output_lens")
BENCHMARK_SUMMARY_KEYS = ("backend", "request_rate", "duration")  # a run saved without its per-request arrays
BENCHMARK_FORMAT = TraceFormat("arrival_s", "input_lens", "output_lens", "s", drop_failed=True)
# Seed of the arrivals drawn for a benchmark result that records none (a fixed seed: the same file, the same trace).
BENCHMARK_SEED = 0


class UnknownTraceFormat(ValueError):
    """The columns match no known format; ``columns`` are the file's, for a column mapping. ``name`` (how messages
    name the file) leads the message when given."""

    def __init__(self, columns, name: str | None = None) -> None:
        self.columns = list(columns)
        expected = "; ".join([*(f"{n}: {f.arrival}, {f.prompt}, {f.output}" for n, f in FORMATS.items()),
                              f"vLLM / SGLang benchmark result: {', '.join(BENCHMARK_KEYS)} (lists)"])
        super().__init__(f"{name + ': ' if name else ''}unknown trace columns {column_list(self.columns)}; expected "
                         f"one of {expected}, or give a column mapping")


def column_mapping(text: str, time_unit: str = "s") -> TraceFormat:
    """A :class:`TraceFormat` from ``arrival=COL,prompt=COL,output=COL[,hash_ids=COL][,predicted=COL]``."""
    pairs = {}
    for part in text.split(","):
        key, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not column or key not in MAPPING_KEYS or key in pairs:
            raise ValueError(f"column mapping needs KEY=COLUMN pairs, each key once, keys "
                             f"{', '.join(MAPPING_KEYS)}; got {part.strip()!r}")
        pairs[key] = column
    missing = [k for k in MAPPING_KEYS[:3] if k not in pairs]
    if missing:
        raise ValueError(f"column mapping lacks {', '.join(missing)}")
    return TraceFormat(pairs["arrival"], pairs["prompt"], pairs["output"], time_unit, pairs.get("hash_ids"),
                       predicted=pairs.get("predicted"))


def line_list(mask: pd.Series) -> str:
    """The file lines where ``mask`` holds (its index holds file line numbers), at most 20 shown, and their count."""
    lines = mask.index[mask.to_numpy(bool)].tolist()  # the raw table's index holds file line numbers
    shown = ", ".join(map(str, lines[:20]))
    return f"{shown}{' ...' if len(lines) > 20 else ''} ({len(lines)} rows)"


def _name(source: Source, what: str, name: str | None) -> str:
    """How messages name the file: its given name, else its path, else "the trace file"."""
    if name is not None:
        return label(name, f"{what} file")
    return label(source if isinstance(source, (str, Path)) else None, f"{what} file")


def named_errors(source: Source, what: str, name: str | None, parse, *args):
    """``parse(*args)``, its ValueErrors led by the file's name when it has one (a path, or ``name``)."""
    try:
        return parse(*args)
    except ValueError as exc:
        if name is None and not isinstance(source, (str, Path)):
            raise
        if isinstance(exc, UnknownTraceFormat):
            raise UnknownTraceFormat(exc.columns, _name(source, what, name)) from None
        raise ValueError(f"{_name(source, what, name)}: {exc}") from None


def read_bytes(source: Source, max_bytes: int | None = MAX_UPLOAD_BYTES, what: str = "trace",
               name: str | None = None) -> bytes:
    """The file's bytes, refused above ``max_bytes`` (None: bytes and streams unbounded, a path within
    :func:`lenscope.analysis.core.safe_files.disk_limit`). A path must be a regular file, and is read at most
    ``max_bytes`` + 1 bytes (its size is never trusted: devices and pipes say 0). ``what`` names the kind of file in
    messages, ``name`` the file (default: its path)."""
    name = _name(source, what, name)  # as messages say it: "trace file 'a.csv'"
    if isinstance(source, (str, Path)):
        why = ""
        if max_bytes is None:
            max_bytes, why = disk_limit()
        return read_bounded(regular_file(source, f"{what} file"), max_bytes, name, why=why)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        data = source.read() if max_bytes is None else source.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        more = "more than " if not isinstance(source, (bytes, bytearray, memoryview)) else ""
        raise LimitError(f"{name} is {more}{len(data) / 2**20:.1f} MB; the limit is {max_bytes / 2**20:.0f} MB")
    return data


def _read_jsonl(data: bytes, max_rows: int | None, what: str, name: str) -> pd.DataFrame:
    records, lines, bad, keys = [], [], [], {}  # keys: every record's, in order
    first_line = None
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        first_line = first_line or number
        if len(records) == max_rows:
            raise LimitError(f"{name} has more than {max_rows:,} rows; the limit is {max_rows:,}: cut it (e.g. "
                             "head -n)")
        try:
            record = load_json(line, f"{name} line {number:,}")
        except LimitError:
            raise
        except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError (no msg)
            bad.append((number, getattr(exc, "msg", "not UTF-8 text")))
            continue
        if not isinstance(record, dict):
            bad.append((number, "not a JSON object"))
            continue
        keys.update(record)
        if len(keys) > MAX_COLUMNS:
            raise LimitError(f"{name} has {len(keys):,} distinct keys by line {number:,} {column_list(keys, 3)}; the "
                             f"limit is {MAX_COLUMNS:,} columns")
        records.append(record)
        lines.append(number)
    if bad and bad[0][0] == first_line:  # maybe one JSON object over several lines (a pretty-printed result)
        whole = _one_object(data, name)
        if whole is not None:
            return pd.DataFrame.from_records([whole], index=pd.Index([first_line]))
    if bad:
        shown = "; ".join(f"line {n}: {why}" for n, why in bad[:5])
        raise ValueError(f"{name} is not a JSON-lines {what} file: {len(bad)} line(s) not a JSON object ({shown}"
                         f"{' ...' if len(bad) > 5 else ''})")
    return pd.DataFrame.from_records(records, index=pd.Index(lines))


def _one_object(data: bytes, name: str) -> dict | None:
    """The whole of ``data`` as one JSON object, or None when it is not one (within :func:`load_json`'s bounds)."""
    try:
        whole = load_json(data, name)
    except LimitError:
        raise
    except ValueError:
        return None
    return whole if isinstance(whole, dict) else None


def read_trace_table(source: Source, max_bytes: int | None = MAX_UPLOAD_BYTES, max_rows: int | None = MAX_ROWS,
                     what: str = "trace", name: str | None = None) -> pd.DataFrame:
    """Read a trace CSV or JSON-lines file (path, bytes or binary file) enforcing the size limits (None: no row
    limit, and bytes unbounded but for a path, see :func:`read_bytes`) and the bounds of
    :mod:`lenscope.analysis.core.safe_files` (line length, columns, JSON nesting and integer digits): raw columns (CSV
    values as text), indexed by file line number. ``what`` names the kind of file in messages, ``name`` the file
    (default: its path)."""
    data = read_bytes(source, max_bytes, what, name).removeprefix(b"\xef\xbb\xbf")
    name = _name(source, what, name)
    first = re.search(rb"\S", data)  # no copy of the data, unlike strip()
    if first is None:
        raise ValueError(f"{name} is empty")
    check_lines(data, name)
    if data[first.start():first.start() + 1] == b"{":
        return _read_jsonl(data, max_rows, what, name)
    frame = read_csv_bounded(data, name, max_rows, dtype=str, skipinitialspace=True)
    frame.columns = [str(c).strip() for c in frame.columns]
    frame.index = pd.RangeIndex(2, len(frame) + 2)  # line 1 is the header
    return frame


def is_benchmark_result(columns) -> bool:
    """Whether ``columns`` (a table's, or a JSON record's keys) are a serving benchmark's result, with per-request
    arrays or (refused later, saying how to save them) without."""
    return set(BENCHMARK_KEYS) <= set(columns) or set(BENCHMARK_SUMMARY_KEYS) <= set(columns)


def detect_format(columns) -> str:
    """Name of the known format whose columns are all present (:data:`BENCHMARK` for a serving benchmark's
    result)."""
    if is_benchmark_result(columns):
        return BENCHMARK
    for name, fmt in FORMATS.items():
        if {fmt.arrival, fmt.prompt, fmt.output} <= set(columns):
            return name
    raise UnknownTraceFormat(columns)


def _resolve(columns, fmt: str | TraceFormat | None) -> TraceFormat:
    """The format to read ``columns`` with; a user's mapping must name existing columns only (hash_ids too)."""
    if isinstance(fmt, TraceFormat):
        chosen, needed = fmt, (fmt.arrival, fmt.prompt, fmt.output, fmt.hash_ids, fmt.predicted)
    else:
        name = fmt or detect_format(columns)
        if name not in FORMATS:
            raise ValueError(f"unknown trace format {name!r}; choose one of {', '.join(FORMATS)}, or leave it out "
                             "(a benchmark result is recognised by its keys)")
        chosen = FORMATS[name]
        needed = (chosen.arrival, chosen.prompt, chosen.output)  # block hashes, predictions: optional here
    missing = [c for c in needed if c and c not in columns]
    if missing:
        raise ValueError(f"the trace has no column {', '.join(map(repr, missing))}; its columns are "
                         f"{column_list(columns)}")
    return chosen


def _arrivals(column: pd.Series, unit: str) -> tuple[pd.Series, pd.Series, str]:
    """Seconds from the first valid arrival, the invalid rows, and the rule they break."""
    if unit == "datetime":
        stamps = pd.to_datetime(column, errors="coerce", format="mixed", utc=True)
        bad = stamps.isna()
        seconds = (stamps - stamps.min()).dt.total_seconds()
        rule = "readable timestamps"
    else:
        seconds = pd.to_numeric(column, errors="coerce") * TIME_UNITS[unit]
        bad = seconds.isna() | (seconds < 0) | ~np.isfinite(seconds.fillna(0))
        if (~bad).any():
            seconds = seconds - seconds[~bad].min()
        rule = f"non-negative numbers ({unit})"
    bad |= seconds > MAX_ARRIVAL_S
    return seconds, bad, f"{rule} spanning at most {MAX_ARRIVAL_S:,.0f} s (a year)"


def token_counts(column: pd.Series) -> tuple[pd.Series, pd.Series]:
    """A column as token counts, and the rows that are not whole numbers from 1 to :data:`MAX_TOKENS`."""
    values = pd.to_numeric(column, errors="coerce")
    return values, values.isna() | (values < 1) | (values > MAX_TOKENS) | (values != values.round())


def predicted_lengths(column: pd.Series) -> tuple[pd.Series, pd.Series]:
    """A column as predicted lengths in tokens (any real number), and the rows that are not numbers from 0 to
    :data:`MAX_TOKENS`."""
    values = pd.to_numeric(column, errors="coerce").astype(float)
    return values, values.isna() | (values < 0) | (values > MAX_TOKENS)


def _block_hashes(value) -> tuple[int, ...] | None:
    """A list of integer block hashes (a JSON array in CSV text), or None when it is not one."""
    if isinstance(value, str):
        try:
            value = load_json(value, "a hash_ids cell")
        except ValueError:  # malformed, or over the bounds on nesting and digits
            return None
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        return None
    return tuple(value)


def _cell(record: pd.Series, key: str):
    """A JSON record's value at ``key``; None when absent (a key only other lines have reads as NaN)."""
    value = record.get(key)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _numbers(values: list) -> list:
    """A JSON array's numbers, anything else (text, lists, booleans, null) None: flagged by the checks later."""
    return [v if _real(v) else None for v in values]


def _benchmark_tool(columns) -> str:
    """Which benchmark wrote a result, from keys only one of them writes."""
    keys = set(columns)
    if keys & {"burstiness", "model_id", "tokenizer_id", "start_times", "request_goodput"}:
        return "vLLM"
    if keys & {"dataset_name", "accept_length", "total_output_tokens_retokenized"}:
        return "SGLang"
    return "vLLM / SGLang"


def _real(value) -> bool:
    """Whether a JSON value (as pandas holds it: a numpy scalar in a column of several lines) is a number."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _request_rate(value) -> float | None:
    """A result's ``request_rate``: a positive number, or inf (vLLM writes "inf", SGLang Infinity); None otherwise."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if _real(value) and value > 0:
        return float(value)
    return None


def _benchmark_arrivals(record: pd.Series, n: int, tool: str) -> tuple[str, list, str]:
    """The arrival column's name, its values (seconds) and a note saying where they come from.

    Recorded times win: ``start_times`` (newer vLLM: when each request was sent, ``queue_times`` after it was due
    when a client-side concurrency limit held it back, so the arrival is their difference). Without them the
    arrivals are drawn the way the benchmark drew them, from its ``request_rate``: a Poisson process (vLLM's
    ``burstiness`` other than 1: gamma-distributed gaps), seeded with :data:`BENCHMARK_SEED`, first request at 0 s;
    rate inf: every request at 0 s, as the benchmark sent them. Neither: refused."""
    limit = _cell(record, "max_concurrency")
    limit = f"{limit:g}" if _real(limit) else limit  # 8, not the 8.0 of a column with gaps
    unreplayed = f"; its client-side max_concurrency {limit} is not replayed" if limit is not None else ""
    starts = _cell(record, "start_times")
    if isinstance(starts, list) and len(starts) == n:
        queued = _cell(record, "queue_times")
        if isinstance(queued, list) and len(queued) == n:
            due = [s - q if s is not None and q is not None else None
                   for s, q in zip(_numbers(starts), _numbers(queued), strict=True)]
            return "start_times", due, "arrivals from its start_times less queue_times (when each request was due)"
        sent = "arrivals from its start_times (when each request was sent)"
        return "start_times", _numbers(starts), sent + unreplayed
    rate = _request_rate(_cell(record, "request_rate"))
    if rate is None:
        raise ValueError(f"the {tool} benchmark result records no arrival times (start_times) and no usable "
                         f"request_rate (got {_cell(record, 'request_rate')!r}) to derive them from")
    if math.isinf(rate):
        return "arrival_s", [0.0] * n, "request_rate inf: every request arrives at 0 s, as the benchmark sent them" \
            f"{unreplayed}"
    burstiness = _cell(record, "burstiness")
    burstiness = float(burstiness) if _real(burstiness) and 0 < burstiness < math.inf else 1.0
    gaps = np.random.default_rng(BENCHMARK_SEED).gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0
    process = "a Poisson process" if burstiness == 1 else f"a gamma process (burstiness {burstiness:g})"
    return "arrival_s", np.cumsum(gaps).tolist(), (
        f"the file records no arrival times: arrivals drawn as {process} at its request_rate {rate:g} req/s (seed "
        f"{BENCHMARK_SEED}), as the benchmark drew them, not the times it sent them{unreplayed}")


def benchmark_requests(raw: pd.DataFrame) -> tuple[pd.DataFrame, TraceFormat, str]:
    """The requests of a serving benchmark's result (raw columns of :func:`read_trace_table`, one row per run), as
    raw per-request columns indexed by the requests' index in its arrays, the format to read them with, and a note
    on where their arrivals come from (:func:`_benchmark_arrivals`).

    Prompt and output lengths are ``input_lens`` and ``output_lens`` (vLLM writes them with ``--save-result``, newer
    versions with ``--save-detailed`` only; SGLang with ``--output-details``); TTFTs, ITLs and texts are not read.
    The file must hold exactly one run with them: SGLang appends a line per run."""
    tool = _benchmark_tool(raw.columns)
    lengths = raw.get("input_lens", pd.Series(None, index=raw.index, dtype=object))
    runs = [line for line in raw.index if isinstance(lengths[line], list)]
    if not runs:
        raise ValueError(f"the {tool} benchmark result has no per-request lengths (input_lens, output_lens): save it "
                         "with vLLM's --save-result --save-detailed or SGLang's --output-details")
    if len(runs) > 1:
        raise ValueError(f"the file holds {len(runs)} {tool} benchmark runs (lines {', '.join(map(str, runs[:10]))}"
                         f"{' ...' if len(runs) > 10 else ''}); keep the one to replay, e.g. sed -n {runs[-1]}p FILE "
                         "> run.jsonl")
    record = raw.loc[runs[0]]
    prompts, outputs = record["input_lens"], _cell(record, "output_lens")
    if not isinstance(outputs, list) or len(outputs) != len(prompts):
        size = len(outputs) if isinstance(outputs, list) else type(outputs).__name__
        raise ValueError(f"the {tool} benchmark result needs input_lens and output_lens of the same length (got "
                         f"{len(prompts):,} and {size})")
    if not prompts:
        raise ValueError(f"the {tool} benchmark result has no requests (empty input_lens)")
    if len(prompts) > MAX_ROWS:
        raise LimitError(f"the {tool} benchmark result has {len(prompts):,} requests; the limit is {MAX_ROWS:,}")
    arrival, arrivals, note = _benchmark_arrivals(record, len(prompts), tool)
    frame = pd.DataFrame({arrival: arrivals, "input_lens": _numbers(prompts), "output_lens": _numbers(outputs)},
                         index=pd.RangeIndex(len(prompts)), dtype=object)
    where = f" (line {runs[0]} of {len(raw)})" if len(raw) > 1 else ""
    return frame, replace(BENCHMARK_FORMAT, arrival=arrival), f"{tool} benchmark result{where}: {note}"


def parse_trace(raw: pd.DataFrame, fmt: str | TraceFormat | None = None) -> pd.DataFrame:
    """Convert the raw columns of :func:`read_trace_table` (indexed by file line) into the canonical trace
    frame, in a named format (detected when None) or through a user's :class:`TraceFormat`.

    All problems are collected and reported together, each with its file line numbers (a benchmark result's: the
    requests' index in its arrays)."""
    notes, where = [], "lines"
    if fmt in (None, BENCHMARK) and is_benchmark_result(raw.columns):
        raw, fmt, note = benchmark_requests(raw)
        notes, where = [note], "at index"
    fmt = _resolve(raw.columns, fmt)
    if fmt.drop_failed:
        failed = pd.to_numeric(raw[fmt.output], errors="coerce") == 0
        if failed.any():
            notes.append(f"left out {int(failed.sum()):,} failed request(s) ({fmt.output!r} 0) of {len(raw):,}")
            raw = raw[~failed]
    if raw.empty:
        raise ValueError("trace has no requests" + (f" ({notes[-1]})" if notes else ""))
    arrival, bad_time, time_rule = _arrivals(raw[fmt.arrival], fmt.time_unit)
    problems = [f"column {fmt.arrival!r} needs {time_rule}: {where} {line_list(bad_time)}"] if bad_time.any() else []
    prompt, bad_prompt = token_counts(raw[fmt.prompt])
    output, bad_output = token_counts(raw[fmt.output])
    for col, bad in ((fmt.prompt, bad_prompt), (fmt.output, bad_output)):
        if bad.any():
            problems.append(f"column {col!r} needs whole numbers from 1 to {MAX_TOKENS:,}: {where} {line_list(bad)}")
    columns = {"arrival_s": arrival.astype(float), "prompt_tokens": prompt, "output_tokens": output}
    if fmt.hash_ids in raw.columns:
        columns["hash_ids"] = raw[fmt.hash_ids].map(_block_hashes)
        bad = columns["hash_ids"].isna()
        if bad.any():
            problems.append(f"column {fmt.hash_ids!r} needs lists of integer block hashes: lines {line_list(bad)}")
    predicted = fmt.predicted or PREDICTED_COLUMN
    if predicted in raw.columns:
        columns["predicted_tokens"], bad = predicted_lengths(raw[predicted])
        if bad.any():
            problems.append(f"column {predicted!r} needs numbers from 0 to {MAX_TOKENS:,}: lines {line_list(bad)}")
    if problems:
        raise ValueError("malformed trace; " + "; ".join(problems))
    frame = pd.DataFrame(columns).astype({"prompt_tokens": np.int64, "output_tokens": np.int64})
    frame = frame.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    frame.attrs["notes"] = notes
    return frame


def load_trace_file(source: Source, fmt: str | TraceFormat | None = None, name: str | None = None) -> pd.DataFrame:
    """Read and parse a trace file: Azure 2023/2024, BurstGPT, LLMServingSim, Vidur or generic CSV, Mooncake JSON
    lines, a vLLM / SGLang benchmark result (:func:`benchmark_requests`), or any CSV / JSON-lines file through a
    column mapping (``fmt``), within the limits of :func:`read_trace_table`; ``name`` (an upload's) names the file
    in messages (default: its path)."""
    return named_errors(source, "trace", name, parse_trace, read_trace_table(source, name=name), fmt)


def poisson_retime(trace: pd.DataFrame, qps: float, seed: int = 0) -> pd.DataFrame:
    """Same requests in the same order, with Poisson arrivals at ``qps`` requests per second."""
    if qps <= 0:
        raise ValueError("QPS must be positive")
    gaps = np.random.default_rng(seed).exponential(1.0 / qps, size=len(trace))
    gaps[0] = 0.0
    out = trace.copy()
    out["arrival_s"] = np.cumsum(gaps)
    return out.reset_index(drop=True)


def filter_trace(trace: pd.DataFrame, max_prompt_tokens: int | None = None,
                 first_n: int | None = None) -> pd.DataFrame:
    """Keep requests with at most ``max_prompt_tokens`` prompt tokens, then the first ``first_n``."""
    out = trace
    if max_prompt_tokens is not None:
        out = out[out["prompt_tokens"] <= max_prompt_tokens]
    if first_n is not None:
        out = out.head(first_n)
    if out.empty:
        raise ValueError("no request is left after filtering")
    return out.reset_index(drop=True)


def draw_requests(pool: pd.DataFrame, n: int, seed: int = 0, workload: str = "uniform") -> pd.DataFrame:
    """``n`` requests of a freshly drawn pool: a bootstrap resample of ``pool`` (which of its requests make up the
    trace), then ``n`` requests drawn from that with replacement, as ``workload`` says (:data:`WORKLOADS`).
    Seeded; arrivals are left as they are (re-time them)."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, not {workload!r}")
    if pool.empty or n < 1:
        raise ValueError("need a non-empty pool and at least one request")
    rng = np.random.default_rng(seed)
    resampled = pool.iloc[rng.integers(0, len(pool), size=len(pool))]
    weights = resampled["output_tokens"].to_numpy(float) if workload == "decode-bound" else np.ones(len(pool))
    rows = rng.choice(len(resampled), size=n, p=weights / weights.sum())
    return resampled.iloc[rows].reset_index(drop=True)


def from_runs(runs: pd.DataFrame, qps: float, seed: int = 0) -> pd.DataFrame:
    """Trace of the app's own runs (``store.runs_frame(dataset)``): true lengths, Poisson arrivals, and (when the
    runs say) which answers were cut at the token cap (``censored``: at least that long, replayed as that long)."""
    if runs.empty:
        raise ValueError("the dataset has no runs yet; create some with `python -m lenscope collect`")
    frame = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": runs["prompt_tokens"].astype(np.int64),
                          "output_tokens": runs["output_tokens"].clip(lower=1).astype(np.int64),
                          "run_id": runs["run_id"].astype(np.int64)})
    if "censored" in runs:
        frame["censored"] = runs["censored"].astype(bool).to_numpy()
    return poisson_retime(frame, qps, seed)


def trace_hash(trace: pd.DataFrame) -> str:
    """Content hash of a trace (arrivals rounded to microseconds, lengths, and run ids, block hashes and
    predicted lengths if any)."""
    cols = TRACE_COLUMNS + [c for c in ("run_id", "hash_ids", "predicted_tokens") if c in trace]
    data = trace[cols].round({"arrival_s": 6}).to_csv(index=False)
    return hashlib.sha256(data.encode()).hexdigest()


def _columns(path: Path) -> list[str]:
    """Column names of a trace file: its CSV header, or the keys of its first JSON line."""
    with regular_file(path, "trace file").open("rb") as fh:
        first = fh.readline(MAX_LINE_BYTES).removeprefix(b"\xef\xbb\xbf")
    if first.lstrip()[:1] == b"{":
        record = load_json(first, label(path, "trace file"))
        return list(record) if isinstance(record, dict) else []
    check_csv_header(first, label(path, "trace file"))
    return [c.strip() for c in pd.read_csv(io.BytesIO(first), nrows=0).columns]


def trace_files(root: Path) -> list[Path]:
    """Request traces (not profiles) among the CSV, JSON-lines and JSON (benchmark result) files of a folder (none if
    it is absent)."""
    found = []
    for path in sorted([*root.glob("*.csv"), *root.glob("*.jsonl"), *root.glob("*.json")]) if root.is_dir() else []:
        try:
            detect_format(_columns(path))
        except ValueError:
            continue
        found.append(path)
    return found
