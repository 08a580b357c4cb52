"""Jobs on a Ray cluster: collection sharded over actors that each hold the target once, and task fan-out.

Nothing here imports Ray until a job asks for it, so the app and the CLI run without Ray installed.
``connect(address)`` joins a cluster (``ray://HOST:10001`` or ``auto``) or starts a local one; collection
workers are one per GPU of the cluster, or one per CPU slot when it has none. Workers return finished runs to
the driver, which writes them into its store (SQLite or the team's PostgreSQL): the run key makes a
retried shard's runs the same rows, never duplicates.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lenscope.models.engine import BatchedEngine, Generation, GenerationSettings
from lenscope.models.target import TargetModel

WORKER_NAME = "lenscope-collect-{}"  # numbered in start order; a retried shard's worker gets the next number


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a Ray job runs: ``address`` None starts a local cluster (``num_cpus`` caps it);
    ``workers`` None means one per GPU, else one per CPU slot; a collection shard holds ``shard_size`` requests
    and is retried at most ``max_retries`` times when its worker dies."""

    address: str | None = None
    workers: int | None = None
    shard_size: int = 8
    max_retries: int = 2
    num_cpus: int | None = None

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError("a Ray job needs at least one worker")
        if self.shard_size < 1 or self.max_retries < 0:
            raise ValueError("shard size must be positive and retries non-negative")


def require_ray():
    """The ``ray`` module, with an install hint when it is missing."""
    if importlib.util.find_spec("ray") is None:
        raise RuntimeError("--ray needs Ray: pip install -r requirements-ray.txt")
    import ray

    return ray


def connect(options: RayOptions):
    """Ray, joined to ``options.address`` or to a local cluster started here (reused when already up)."""
    ray = require_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning",
                                  "log_to_driver": False}
        if options.address:
            ray.init(address=options.address, **kwargs)
        else:
            ray.init(num_cpus=options.num_cpus, **kwargs)
    return ray


def worker_count(ray, options: RayOptions) -> tuple[int, dict[str, float]]:
    """How many collection workers to start and the resources each takes: one GPU each when the cluster has
    GPUs, else one CPU slot each."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    if gpus:
        return options.workers or gpus, {"num_gpus": 1, "num_cpus": 1}
    return options.workers or cpus, {"num_cpus": 1}


class CollectWorker:
    """A Ray actor's state: the target loaded once and the batched engine that samples its shards."""

    def __init__(self, spec: str, key: str, device: str, dtype: str, layers: list[int], batch_size: int | str,
                 features: str, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        target = TargetModel.load(spec or None, device=device, dtype=dtype)
        if target.key != key:
            raise RuntimeError(f"the worker loaded a different model for {spec!r} than the driver: the cluster's "
                               "machines need the same model files")
        self.engine = BatchedEngine(target, layers, batch_size=batch_size, features=features)

    def generate(self, prompts: list[list[int]], settings: list[GenerationSettings]) -> list[tuple[int, Generation]]:
        """Every answer of a shard, by its index in the shard."""
        return list(self.engine.run(prompts, settings))

    def pid(self) -> int:
        return os.getpid()


def ray_generate(target: TargetModel, layers: Sequence[int], batch_size: int | str, features: str,
                 options: RayOptions) -> Callable[[list[list[int]], list[GenerationSettings]],
                                                  Iterator[tuple[int, Generation]]]:
    """A drop-in for :meth:`BatchedEngine.run` that samples on Ray workers: requests go out in shards of
    ``options.shard_size`` and come back as each shard finishes; a shard whose worker dies is sent to a fresh
    worker (at most ``options.max_retries`` times)."""
    def run(prompts: list[list[int]], settings: list[GenerationSettings]) -> Iterator[tuple[int, Generation]]:
        if not prompts:  # everything was stored already: no cluster needed
            return
        ray = connect(options)
        n_workers, resources = worker_count(ray, options)
        device = "auto" if "num_gpus" in resources else "cpu"
        threads = max(1, int(ray.cluster_resources().get("CPU", 1)) // n_workers)
        actor = ray.remote(**resources)(CollectWorker)
        started = itertools.count()

        def start():
            return actor.options(name=WORKER_NAME.format(next(started))).remote(
                target.source.spec, target.key, device, target.dtype, list(layers), batch_size, features, threads)

        shards = deque(list(range(i, min(i + options.shard_size, len(prompts))))
                       for i in range(0, len(prompts), options.shard_size))
        workers = {slot: start() for slot in range(min(n_workers, len(shards)))}
        retries = [0] * len(prompts)
        in_flight: dict[Any, tuple[int, list[int]]] = {}

        def submit(slot: int) -> None:
            if shards:
                shard = shards.popleft()
                ref = workers[slot].generate.remote([prompts[i] for i in shard], [settings[i] for i in shard])
                in_flight[ref] = (slot, shard)

        try:
            for slot in workers:
                submit(slot)
            while in_flight:
                (ref,), _ = ray.wait(list(in_flight), num_returns=1)
                slot, shard = in_flight.pop(ref)
                try:
                    answers = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                    retries[shard[0]] += 1
                    if retries[shard[0]] > options.max_retries:
                        raise RuntimeError(f"a collection shard failed {retries[shard[0]]} times: {exc}") from exc
                    ray.kill(workers[slot], no_restart=True)
                    workers[slot] = start()
                    shards.appendleft(shard)
                    submit(slot)
                    continue
                submit(slot)
                for j, generation in answers:
                    yield shard[j], generation
        finally:
            for handle in workers.values():
                ray.kill(handle, no_restart=True)

    return run


def ray_map(fn: Callable[..., Any], calls: Sequence[tuple], options: RayOptions,
            on_result: Callable[[int], None] | None = None) -> list[Any]:
    """``[fn(*args) for args in calls]`` as Ray tasks (one CPU each), in order; ``on_result(done)`` after each.
    Nothing to call starts no cluster."""
    if not calls:
        return []
    ray = connect(options)
    task = ray.remote(num_cpus=1)(fn)
    refs = [task.remote(*args) for args in calls]
    index = {ref: i for i, ref in enumerate(refs)}
    out: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        out[index[done[0]]] = ray.get(done[0])
        if on_result:
            on_result(len(refs) - len(pending))
    return out
