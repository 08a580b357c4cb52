"""Request traces for the scheduler simulator: importers, validation, re-timing and filters.

Every importer returns a frame with columns ``arrival_s`` (seconds from the first request),
``prompt_tokens``, ``output_tokens`` (and ``run_id`` for traces built from the app's own runs),
sorted by arrival. Malformed input raises ``ValueError`` naming the offending CSV lines.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
MAX_ROWS = 200_000
# Bounds that keep simulated clocks and token counts exact in float64 / int64: a year of arrivals, and ten
# million tokens per request (far beyond any context window).
MAX_ARRIVAL_S = 365 * 24 * 3600.0
MAX_TOKENS = 10_000_000
TRACE_COLUMNS = ["arrival_s", "prompt_tokens", "output_tokens"]
FORMATS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "llmservingsim": ("arrival_time_ns", "input_toks", "output_toks"),
    "generic": ("arrival", "prompt_tokens", "output_tokens"),
}


def _line_list(mask: pd.Series) -> str:
    lines = (np.flatnonzero(mask.to_numpy()) + 2).tolist()  # +1 for the header, +1 for 1-based lines
    shown = ", ".join(map(str, lines[:20]))
    return f"{shown}{' ...' if len(lines) > 20 else ''} ({len(lines)} rows)"


def read_trace_csv(source: str | Path | bytes | BinaryIO, max_bytes: int = MAX_UPLOAD_BYTES,
                   max_rows: int = MAX_ROWS) -> pd.DataFrame:
    """Read a trace CSV (path, bytes or binary file) enforcing the size limits; raw columns."""
    if isinstance(source, (str, Path)):
        size = Path(source).stat().st_size
        data: str | Path | io.BytesIO = Path(source)
    else:
        raw = source if isinstance(source, bytes) else source.read()
        size, data = len(raw), io.BytesIO(raw)
    if size > max_bytes:
        raise ValueError(f"trace file is {size / 2**20:.1f} MB; the limit is {max_bytes / 2**20:.0f} MB")
    try:
        frame = pd.read_csv(data, nrows=max_rows + 1, dtype=str, skipinitialspace=True)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a readable CSV file: {exc}") from exc
    if len(frame) > max_rows:
        raise ValueError(f"trace has more than {max_rows:,} rows; cut it (e.g. head -n) before uploading")
    frame.columns = [c.strip() for c in frame.columns]
    return frame


def detect_format(columns) -> str:
    """Name of the known format whose columns are all present."""
    for name, cols in FORMATS.items():
        if set(cols) <= set(columns):
            return name
    expected = "; ".join(f"{n}: {', '.join(c)}" for n, c in FORMATS.items())
    raise ValueError(f"unknown trace columns {list(columns)}; expected one of {expected}")


def _tokens(column: pd.Series) -> tuple[pd.Series, pd.Series]:
    values = pd.to_numeric(column, errors="coerce")
    return values, values.isna() | (values < 1) | (values > MAX_TOKENS) | (values != values.round())


def parse_trace(raw: pd.DataFrame, fmt: str | None = None) -> pd.DataFrame:
    """Convert raw CSV columns of a known format into the canonical trace frame.

    All problems are collected and reported together, each with its CSV line numbers."""
    fmt = fmt or detect_format(raw.columns)
    t_col, p_col, o_col = FORMATS[fmt]
    if raw.empty:
        raise ValueError("trace has no requests")
    problems = []
    if fmt == "azure":
        stamps = pd.to_datetime(raw[t_col], errors="coerce", format="mixed")
        bad_time = stamps.isna()
        arrival = (stamps - stamps.min()).dt.total_seconds()
        time_rule = "readable timestamps"
    else:
        arrival = pd.to_numeric(raw[t_col], errors="coerce")
        arrival = (arrival / 1e9 if fmt == "llmservingsim" else arrival)
        bad_time = arrival.isna() | (arrival < 0) | ~np.isfinite(arrival.fillna(0))
        arrival = arrival - arrival[~bad_time].min() if (~bad_time).any() else arrival
        bad_time |= arrival > MAX_ARRIVAL_S
        time_rule = f"non-negative numbers spanning at most {MAX_ARRIVAL_S:,.0f} s (a year)"
    if bad_time.any():
        problems.append(f"column {t_col!r} needs {time_rule}: CSV lines {_line_list(bad_time)}")
    prompt, bad_prompt = _tokens(raw[p_col])
    output, bad_output = _tokens(raw[o_col])
    for col, bad in ((p_col, bad_prompt), (o_col, bad_output)):
        if bad.any():
            problems.append(f"column {col!r} needs whole numbers from 1 to {MAX_TOKENS:,}: CSV lines "
                            f"{_line_list(bad)}")
    if problems:
        raise ValueError("malformed trace; " + "; ".join(problems))
    frame = pd.DataFrame({"arrival_s": arrival.astype(float), "prompt_tokens": prompt.astype(np.int64),
                          "output_tokens": output.astype(np.int64)})
    return frame.sort_values("arrival_s", kind="stable").reset_index(drop=True)


def load_trace_file(source: str | Path | bytes | BinaryIO, fmt: str | None = None) -> pd.DataFrame:
    """Read and parse a trace file (Azure 2023, LLMServingSim or generic CSV)."""
    return parse_trace(read_trace_csv(source), fmt)


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


def from_runs(runs: pd.DataFrame, qps: float, seed: int = 0) -> pd.DataFrame:
    """Trace of the app's own runs (``store.runs_frame(dataset)``): true lengths, Poisson arrivals."""
    if runs.empty:
        raise ValueError("the dataset has no runs yet; create some with `python -m lenscope collect`")
    frame = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": runs["prompt_tokens"].astype(np.int64),
                          "output_tokens": runs["output_tokens"].clip(lower=1).astype(np.int64),
                          "run_id": runs["run_id"].astype(np.int64)})
    return poisson_retime(frame, qps, seed)


def trace_hash(trace: pd.DataFrame) -> str:
    """Content hash of a trace (arrivals rounded to microseconds, lengths, run ids if any)."""
    cols = TRACE_COLUMNS + (["run_id"] if "run_id" in trace else [])
    data = trace[cols].round({"arrival_s": 6}).to_csv(index=False)
    return hashlib.sha256(data.encode()).hexdigest()


def shared_trace_files(root: Path) -> list[Path]:
    """Request traces (not profiles) among the CSV files of a shared traces folder."""
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.glob("*.csv")):
        with path.open() as fh:
            header = [c.strip() for c in fh.readline().strip().split(",")]
        try:
            detect_format(header)
        except ValueError:
            continue
        found.append(path)
    return found
