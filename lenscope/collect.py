"""Dataset collection: sample prompts, generate with the target, store runs with true lengths."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analysis.prompts import PromptItem
from cache.store import Store
from lenscope.runs import generate_cached
from models.target import GenerationSettings, TargetModel


@dataclass
class CollectReport:
    """What a collection did: runs in the dataset, how many were generated vs found in the cache."""

    dataset_id: int
    run_ids: list[int]
    generated: int
    cached: int


def collect_dataset(
    store: Store,
    target: TargetModel,
    name: str,
    prompts: Sequence[PromptItem],
    settings: GenerationSettings,
    samples_per_prompt: int = 1,
    layers: Sequence[int] | None = None,
    on_progress: Callable[[int, int, bool], None] | None = None,
) -> CollectReport:
    """Generate ``samples_per_prompt`` answers (seeds ``seed..seed+K-1``) for every prompt into dataset
    ``name``. Already stored generations are reused, so an interrupted collection resumes where it
    stopped. ``on_progress(done, total, cached)`` is called after each run.
    """
    if samples_per_prompt < 1:
        raise ValueError("samples_per_prompt must be at least 1")
    config = {"settings": settings.as_dict(), "samples_per_prompt": samples_per_prompt,
              "layers": list(layers or target.default_layers())}
    dataset_id = store.ensure_dataset(name, store.ensure_model(target), config)
    total = len(prompts) * samples_per_prompt
    report = CollectReport(dataset_id, [], 0, 0)
    for item in prompts:
        for k in range(samples_per_prompt):
            sample = GenerationSettings(settings.max_new_tokens, settings.temperature, settings.top_p,
                                        settings.seed + k)
            run, hit = generate_cached(store, target, item.text, sample, layers,
                                       source=item.source, source_ref=item.ref)
            store.add_to_dataset(dataset_id, run.id, item.scenario)
            report.run_ids.append(run.id)
            report.cached += hit
            report.generated += not hit
            if on_progress:
                on_progress(len(report.run_ids), total, hit)
    return report
