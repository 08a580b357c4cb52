"""Generations as a portable file: the tokens of a dataset's runs, without features, to ship or resume from.

A file (JSON lines, gzip) holds one header (the dataset, its recorded layers and the model that generated the
answers) and one record per run: prompt text and source, sampling settings (with the sampler version), prompt
and answer token ids, and whether the answer ended with the end-of-turn token. Importing (on the model that
generated them only) recomputes every feature with one teacher-forced batched pass (:meth:`TargetModel.features`)
and stores the runs under their usual cache keys, so a collection continued afterwards skips them: a long
collection survives the machine it started on, a few MB at a time.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.safe_files import LimitError, bounded_lines, disk_limit, load_json, regular_file
from lenscope.jobs.runs.generation_records import check_generations
from lenscope.jobs.runs.generation_records import generated_by as generated_by  # where it was, for its callers
from lenscope.jobs.runs.target_topk import TOPK, keep_import_topk
from lenscope.models.atomic_files import atomic_gzip
from lenscope.models.engine import Generation
from lenscope.models.target import TOP_K, TargetModel
from lenscope.store.store import NewRun, Store

FORMAT = "lenscope-generations/1"
# Runs are imported in windows of consecutive records holding about this many featured tokens (at most ~600 MB of
# float32 states of four layers): the teacher-forced pass groups a window's runs by length, so the bigger the window
# the less padding it computes (the full study, cut: 21% padded tokens in windows of 32 runs, 6% in these), while the
# runs are still stored in file order and a stopped import loses at most one window.
IMPORT_WINDOW_TOKENS = 1 << 16


def export_generations(store: Store, dataset: str, path: Path, on_progress: Progress = no_progress) -> int:
    """Write the runs of ``dataset`` to ``path``; returns how many."""
    runs = store.runs_frame(dataset=dataset)
    if runs.empty:
        raise ValueError(f"dataset {dataset!r} has no runs to export")
    models = set(runs["model_id"])
    if len(models) > 1:
        raise ValueError(f"dataset {dataset!r} mixes runs of {len(models)} models; export one model at a time")
    layers = (store.dataset_config(dataset) or {}).get("layers")
    model = store.model_source(int(runs["model_id"].iloc[0]))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_gzip(path, "wt") as fh:  # all or nothing: a stopped export leaves the previous file
        for i, row in enumerate(runs.itertuples()):
            run = store.load_run(int(row.run_id), layers=[])
            if i == 0:
                fh.write(json.dumps({"format": FORMAT, "dataset": dataset, "layers": layers, "model": model}) + "\n")
            fh.write(json.dumps({"prompt": run.prompt, "source": row.source, "ref": row.source_ref,
                                 "scenario": row.scenario, "settings": run.settings,
                                 "prompt_ids": run.features.input_ids[:run.prompt_len].tolist(),
                                 "output_ids": run.output_ids,
                                 "finished": run.finished}) + "\n")
            on_progress(i + 1, len(runs), "export")
    return len(runs)


def _read_lines(path: Path, limit: int | None = None) -> tuple[dict, list[dict]]:
    """The checked header and the records of a generations file, reading at most ``limit`` lines (clear errors for
    anything else). Only a regular file is read, within the bounds of :mod:`lenscope.analysis.core.safe_files`: its
    decompressed bytes within :func:`~lenscope.analysis.core.safe_files.disk_limit` (a share of the memory available),
    lines, JSON nesting and integer digits (LimitError naming the file and the bound)."""
    max_bytes, why = disk_limit()
    lines: list = []
    try:
        for number, line in bounded_lines(regular_file(path, "generations file"), max_bytes, str(path), gzip=True,
                                          why=why):
            if not line.strip():
                continue
            try:
                lines.append(load_json(line, f"{path} line {number:,}"))
            except LimitError:
                raise
            except ValueError as exc:  # not JSON, not UTF-8
                raise ValueError(f"{path} is not a lenscope generations file: line {number:,} is not JSON "
                                 f"({getattr(exc, 'msg', 'not UTF-8 text')})") from exc
            if len(lines) == limit:
                break
    except (OSError, EOFError, zlib.error) as exc:  # not gzip, cut short
        raise ValueError(f"{path} is not a lenscope generations file: {exc}") from exc
    if not lines or not isinstance(lines[0], dict) or lines[0].get("format") != FORMAT:
        raise ValueError(f"{path} is not a lenscope generations file (expected format {FORMAT})")
    return lines[0], lines[1:]


def read_header(path: Path) -> dict:
    """The header of a generations file alone (clear errors for anything else)."""
    return _read_lines(path, limit=1)[0]


def read_generations(path: Path) -> tuple[dict, list[dict]]:
    """Header and records of a generations file (clear errors for anything else)."""
    return _read_lines(path)


def sample_prompts_of(records: Sequence[dict], prompts: dict[str, int], seed: int = 0) -> list[dict]:
    """The records of ``prompts[scenario]`` prompts per scenario drawn at random with ``seed`` (every sample of a
    drawn prompt, e.g. the K answers of an rl prompt), in file order."""
    rng = random.Random(seed)
    drawn = set()
    for scenario, n in prompts.items():
        texts = list(dict.fromkeys(r["prompt"] for r in records if r["scenario"] == scenario))
        drawn |= {(scenario, text) for text in rng.sample(texts, min(n, len(texts)))}
    return [r for r in records if (r["scenario"], r["prompt"]) in drawn]


def record_keys(store: Store, target: TargetModel, records: Sequence[dict], layers: Sequence[int]) -> list[str]:
    """The run key each record is stored under on ``target`` with features of ``layers``."""
    return [store.run_key(target.key, r["prompt"], r["settings"], layers) for r in records]


def import_generations(store: Store, target: TargetModel, path: Path, dataset: str,
                       layers: Sequence[int] | None = None, finished_only: bool = False,
                       censored_answer_tokens: int | None = None,
                       on_progress: Progress = no_progress) -> tuple[int, int]:
    """Store the runs of a generations file in ``dataset`` with features recomputed on ``target``;
    runs already stored are kept. ``finished_only`` leaves out the runs that hit the token cap: every predictor
    trains and scores on finished runs only, and the censored ones hold most of a long study's tokens, so a
    first import of the finished ones trains sooner (a later import adds the rest). ``censored_answer_tokens``
    computes a censored run's features over its prompt and first answer tokens only (see :func:`import_records`).
    Returns (imported, already stored). Every record is checked before anything is stored
    (:func:`check_generations`)."""
    header, records = read_generations(path)
    check_generations(target, path.name, header, records)  # all of them, numbered as in the file
    if finished_only:
        records = [r for r in records if r["finished"]]
    return import_records(store, target, path.name, header, records, dataset, layers,
                          censored_answer_tokens=censored_answer_tokens, on_progress=on_progress)


def import_records(store: Store, target: TargetModel, source: str, header: dict, records: Sequence[dict],
                   dataset: str, layers: Sequence[int] | None = None, censored_left_out: int = 0,
                   censored_answer_tokens: int | None = None, on_progress: Progress = no_progress) -> tuple[int, int]:
    """:func:`import_generations` of some of the records of file ``source`` (with its ``header``). A dataset
    created here notes ``censored_left_out``: answers of its prompts that hit the cap and were not imported.
    Nothing is stored unless the dataset takes runs of ``target`` and every record passes :func:`check_generations`.

    ``censored_answer_tokens``: the features of a run that hit the cap cover its prompt and only that many answer
    tokens (the store keeps every answer id, and marks the run, :attr:`~lenscope.store.store.StoredRun.features_cut`);
    the full study reads no later step of a censored run. Without it, every position gets features, and a run stored
    with fewer is completed in place."""
    store.check_dataset(dataset, target)  # a dataset of another model, a read-only store: refused first
    check_generations(target, source, header, records)
    layers = target.check_layers(layers if layers is not None else header.get("layers"))
    keys = record_keys(store, target, records, layers)
    found = store.find_runs(keys, whole=censored_answer_tokens is None)
    todo = [r for r, key in zip(records, keys) if key not in found]
    config = {"imported_from": source, "layers": layers,
              **({"censored_not_imported": censored_left_out} if censored_left_out else {})}
    dataset_id = store.ensure_dataset(dataset, target, config)  # refuses a dataset of another model
    for run_id, record in zip((found.get(k) for k in keys), records):
        if run_id is not None:
            store.add_to_dataset(dataset_id, run_id, record["scenario"])
    on_progress(0, len(todo), "import")
    featured = [r["prompt_ids"] + _featured_answer(r, censored_answer_tokens) for r in todo]
    for start, end in _windows([len(ids) for ids in featured], IMPORT_WINDOW_TOKENS):
        batch = todo[start:end]
        features = target.features(featured[start:end], layers, topk=TOPK)
        new = [NewRun(r["prompt"], Generation(
            prompt_len=len(r["prompt_ids"]), features=f.with_top_k(TOP_K), finished=r["finished"],
            settings=r["settings"],
            text=target.tokenizer.decode(r["output_ids"], skip_special_tokens=True), output_ids=r["output_ids"],
            content_start=target.content_start(r["prompt_ids"], r["settings"].get("system_prompt", "default"))),
            r["source"], r["ref"]) for r, f in zip(batch, features)]
        run_ids = store.save_runs(target, new)
        keep_import_topk(store, target, run_ids, features,  # the drafters' KL target, from this same pass
                         [len(r["prompt_ids"]) + len(r["output_ids"]) for r in batch])
        for record, run_id in zip(batch, run_ids):
            store.add_to_dataset(dataset_id, run_id, record["scenario"])
        on_progress(end, len(todo), "import")
    return len(todo), len(records) - len(todo)


def _windows(lengths: Sequence[int], max_tokens: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive runs holding at most ``max_tokens`` of ``lengths`` together (a longer run alone)."""
    start, tokens = 0, 0
    for i, n in enumerate(lengths):
        if i > start and tokens + n > max_tokens:
            yield start, i
            start, tokens = i, 0
        tokens += n
    if start < len(lengths):
        yield start, len(lengths)


def _featured_answer(record: dict, censored_answer_tokens: int | None) -> list[int]:
    """The answer ids of ``record`` that get features: all, or a censored one's first ``censored_answer_tokens``."""
    if record["finished"] or censored_answer_tokens is None:
        return record["output_ids"]
    return record["output_ids"][:censored_answer_tokens]
