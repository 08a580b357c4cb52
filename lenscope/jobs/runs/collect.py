"""Dataset collection: sample prompts with the batched engine, store runs with true lengths as they finish."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from lenscope.analysis.core.progress import Progress, no_progress, with_details
from lenscope.analysis.data.prompts import PromptItem, sample_prompts
from lenscope.jobs.runs.ray_cluster import RayOptions, ray_generate
from lenscope.models.engine import BatchedEngine, Generation, GenerationSettings
from lenscope.models.target import TargetModel
from lenscope.store.store import NewRun, Store

# Finished runs are stored every FLUSH_RUNS runs or FLUSH_SECONDS seconds: a killed collection loses at most that.
FLUSH_RUNS = 16
FLUSH_SECONDS = 5.0
Request = tuple[PromptItem, GenerationSettings]  # one answer to sample: a prompt and its settings
# Samples answers for (prompt ids, settings), yielding (index, generation) as each finishes: BatchedEngine.run or
# its Ray counterpart.
Generate = Callable[[list[list[int]], list[GenerationSettings]], Iterator[tuple[int, Generation]]]


@dataclass
class CollectReport:
    """What a collection did: its runs (in request order), how many were generated vs found in the cache,
    how many generated answers ended with the end-of-turn token, and the engine's throughput."""

    dataset_id: int
    run_ids: list[int]
    generated: int
    cached: int
    finished: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def collection_requests(prompts: Sequence[PromptItem], settings: GenerationSettings,
                        samples_per_prompt: int = 1) -> list[Request]:
    """The requests of a collection in order: each prompt ``samples_per_prompt`` times, seeds ``seed..seed+K-1``."""
    return [(item, replace(settings, seed=settings.seed + k)) for item in prompts for k in range(samples_per_prompt)]


def request_keys(store: Store, target: TargetModel, requests: Sequence[Request],
                 layers: Sequence[int] | None = None) -> list[str]:
    """The run key of every request (what :meth:`Store.find_runs` looks up)."""
    layers = target.check_layers(layers)
    return [store.run_key(target.key, item.text, s.as_dict(), layers) for item, s in requests]


def missing_runs(store: Store, target: TargetModel, name: str, requests: Sequence[Request]) -> int:
    """How many runs a collection of these requests into dataset ``name`` would still generate or add."""
    return missing_from_dataset(store, name, request_keys(store, target, requests))


def missing_from_dataset(store: Store, name: str, keys: Sequence[str]) -> int:
    """How many of the runs with these cache keys dataset ``name`` lacks (stored elsewhere or not at all)."""
    if store.dataset_id(name) is None:
        return len(keys)
    found = store.find_runs(keys)
    in_dataset = set(store.runs_frame(name)["run_id"].astype(int))
    return sum(found.get(key) not in in_dataset for key in keys)


def collect_dataset(
    store: Store,
    target: TargetModel,
    name: str,
    prompts: Sequence[PromptItem],
    settings: GenerationSettings,
    samples_per_prompt: int = 1,
    layers: Sequence[int] | None = None,
    batch_size: int | str = "auto",
    features: str = "decode",
    on_progress: Progress = no_progress,
    ray: RayOptions | None = None,
) -> CollectReport:
    """Generate ``samples_per_prompt`` answers (seeds ``seed..seed+K-1``) for every prompt into dataset
    ``name``: :func:`collect_requests` of :func:`collection_requests`."""
    if samples_per_prompt < 1:
        raise ValueError("samples_per_prompt must be at least 1")
    config = {"settings": settings.as_dict(), "samples_per_prompt": samples_per_prompt}
    return collect_requests(store, target, name, collection_requests(prompts, settings, samples_per_prompt), config,
                            layers, batch_size, features, on_progress, ray)


def collect_requests(
    store: Store,
    target: TargetModel,
    name: str,
    requests: Sequence[Request],
    config: dict,
    layers: Sequence[int] | None = None,
    batch_size: int | str = "auto",
    features: str = "decode",
    on_progress: Progress = no_progress,
    ray: RayOptions | None = None,
) -> CollectReport:
    """Generate an answer for every request (each with its own settings) into dataset ``name`` (created with
    ``config`` plus the recorded layers) with the batched engine, all requests in one batch stream. Runs already
    stored are reused and finished runs are written in batches as they complete, so an interrupted collection
    resumes where it stopped. ``on_progress(done, total, label)`` reports runs done, with the answer tokens/s as
    the label (the CLI's bar and the app's progress bar add the ETA). ``ray`` samples on the workers of a Ray
    cluster instead of in this process (:mod:`lenscope.jobs.runs.ray_cluster`); this process still writes every run.
    """
    layers = target.check_layers(layers)
    new_dataset = store.dataset_id(name) is None
    # Before any generation: a dataset of another model, or a read-only store, fails here with one line.
    dataset_id = store.ensure_dataset(name, target, {**config, "layers": layers})
    try:
        if ray is None:
            generate = BatchedEngine(target, layers, batch_size=batch_size, features=features).run
        else:
            generate = ray_generate(target, layers, batch_size, features, ray)
        return _collect(store, target, dataset_id, list(requests), layers, generate, on_progress)
    except BaseException:
        if new_dataset:  # a collection that failed before storing a run leaves no empty dataset behind
            store.drop_dataset_if_empty(dataset_id)
        raise


def _collect(store: Store, target: TargetModel, dataset_id: int, requests: list[Request], layers: list[int],
             generate: Generate, on_progress: Progress) -> CollectReport:
    keys = request_keys(store, target, requests, layers)
    found = store.find_runs(keys)
    run_ids: list[int | None] = [found.get(key) for key in keys]
    first: dict[str, int] = {}  # a request asked twice (e.g. a prompt drawn by two chunks) is sampled once
    todo = [first.setdefault(key, i) for i, key in enumerate(keys) if run_ids[i] is None and key not in first]
    report = CollectReport(dataset_id, [], generated=0, cached=len(requests) - len(todo))
    total = len(requests)
    pending: list[tuple[int, NewRun]] = []
    last_flush = time.perf_counter()

    def flush() -> None:
        nonlocal pending, last_flush
        if pending:
            saved = store.save_runs(target, [new for _, new in pending])
            for (i, _), run_id in zip(pending, saved):
                run_ids[i] = run_id
                store.add_to_dataset(dataset_id, run_id, requests[i][0].scenario)
        pending, last_flush = [], time.perf_counter()

    on_progress(report.cached, total, "cached runs")
    start = time.perf_counter()
    try:
        prompt_ids = [target.chat_ids(requests[i][0].text, requests[i][1].system_prompt) for i in todo]
        for j, generation in generate(prompt_ids, [requests[i][1] for i in todo]):
            i = todo[j]
            item = requests[i][0]
            pending.append((i, NewRun(item.text, generation, item.source, item.ref)))
            report.generated += 1
            report.finished += generation.finished
            report.tokens += generation.output_length
            if len(pending) >= FLUSH_RUNS or time.perf_counter() - last_flush > FLUSH_SECONDS:
                flush()
            done = report.cached + report.generated
            on_progress(done, total, with_details("sampling", f"{report.tokens / (time.perf_counter() - start):,.0f} "
                                                              "tok/s"))
    finally:
        flush()  # an interruption keeps every run that finished
    report.seconds = time.perf_counter() - start
    run_ids = [run_ids[first[key]] if run_id is None else run_id for key, run_id in zip(keys, run_ids)]
    waiting = set(todo)
    for i, (item, _) in enumerate(requests):
        if i not in waiting:
            store.add_to_dataset(dataset_id, run_ids[i], item.scenario)
    report.run_ids = [int(r) for r in run_ids]
    return report


def collect_sample(store: Store, target: TargetModel, name: str, n: int, sources: dict[str, float],
                   settings: GenerationSettings, on_progress: Progress = no_progress) -> CollectReport:
    """:func:`collect_dataset` on ``n`` prompts drawn from ``sources`` (weights, e.g. ShareGPT and HumanEval)."""
    return collect_dataset(store, target, name, sample_prompts(n, sources), settings, on_progress=on_progress)
