"""The study as one resumable pipeline: import the shipped generations, collect every scenario, train every
predictor, attribute, and judge the claims; each step is skipped when its result is already stored.

Sizes: ``tiny`` (tests: a handful of prompts, a few tokens), ``starter`` (a first look on two CPU cores) and
``full`` (the >= 2,000-run study of the evaluation issue, whose generations ship in ``data/generations/``).
Collection steps always run: a collection of stored requests finds them all in the cache and returns at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from analysis.core.progress import Progress, no_progress
from analysis.data.scenarios import SCENARIO_SAMPLING, build_scenario, long_token_budget
from cache.settings import REPO_ROOT
from cache.store import Store
from lenscope.jobs.baselines import BASELINES, baseline_name, train_baselines
from lenscope.jobs.claims import claims_table
from lenscope.jobs.collect import collect_dataset
from lenscope.jobs.datasets import dataset_runs
from lenscope.jobs.egtp import (
    ABLATION_KIND,
    ATTRIBUTION_KIND,
    PLP_KIND,
    STATIC_KIND,
    ablation_config,
    attribution_config,
    predictor_name,
    run_attribution,
    train_plp,
    train_static,
)
from lenscope.jobs.generations import import_generations
from lenscope.jobs.outlets import drafter_name, probe_name, train_drafter_job, train_probe_job
from models.engine import GenerationSettings
from models.target import TargetModel

CLAIMS_KIND = "study_claims"
SHIPPED = REPO_ROOT / "data" / "generations"
DRAFTER_VARIANTS = ("outlets", "lp-only", "sd-only")


@dataclass(frozen=True)
class Chunk:
    """One collection of the study: ``n`` prompts of a scenario drawn with ``seed`` (also the sampling seed) at
    a token cap; samples and temperature come from the scenario (4 at T = 1.0 for rl, 1 at T = 0.7 otherwise).
    A prompt drawn by two chunks of the same settings is one run, found in the store by the second."""

    scenario: str
    n: int
    max_new_tokens: int
    seed: int = 0


SIZES = {
    "tiny": (Chunk("chat", 10, 48), Chunk("reasoning", 2, 16), Chunk("rl", 1, 16)),
    "starter": (Chunk("chat", 48, 256), Chunk("reasoning", 12, 256), Chunk("rl", 4, 256), Chunk("long", 6, 256)),
    "full": (Chunk("chat", 1400, 1024), Chunk("reasoning", 104, 1024), Chunk("rl", 105, 1024),
             Chunk("long", 500, 1024), Chunk("chat", 700, 1024, seed=1)),
}
# Training epochs per size (the tiny study only proves the pipeline runs end to end).
EPOCHS = {"tiny": {"head": 2, "drafter": 1, "probe": 2}, "starter": {"head": 40, "drafter": 3, "probe": 20},
          "full": {"head": 60, "drafter": 6, "probe": 30}}


@dataclass
class Step:
    """A pipeline step: its name, whether its result is stored already, and how to run it."""

    name: str
    done: Callable[[], bool]
    run: Callable[[Progress], object]


def _fresh(store: Store, name: str, dataset: str) -> bool:
    """A predictor of this name is stored and was trained on every (uncensored) run the dataset has now."""
    predictors = store.predictors_frame().set_index("name")
    if name not in predictors.index:
        return False
    counts = (predictors.loc[name, "metrics"] or {}).get("n") or {}
    return sum(counts.values()) == len(dataset_runs(store, dataset))


def _chunk_step(store: Store, target: TargetModel, dataset: str, chunk: Chunk) -> Step:
    samples, temperature = SCENARIO_SAMPLING[chunk.scenario]

    def run(on_progress: Progress):
        budget = long_token_budget(target.context_length, chunk.max_new_tokens)
        prompts = build_scenario(chunk.scenario, chunk.n, chunk.seed, 2000,
                                 lambda text: len(target.tokenizer(text)["input_ids"]), budget)
        settings = GenerationSettings(chunk.max_new_tokens, temperature, 1.0, 0)
        return collect_dataset(store, target, dataset, prompts, settings, samples, on_progress=on_progress)

    return Step(f"collect {chunk.scenario} ({chunk.n} prompts x {samples}, cap {chunk.max_new_tokens}, "
                f"seed {chunk.seed})",
                lambda: False, run)


def _import_step(store: Store, target: TargetModel, dataset: str, files: list[Path]) -> Step:
    def run(on_progress: Progress):
        return [import_generations(store, target, path, dataset, on_progress=on_progress) for path in files]

    return Step(f"import {len(files)} shipped generations file(s)", lambda: False, run)


def study_steps(store: Store, target: TargetModel, dataset: str, size: str = "starter") -> list[Step]:
    """The steps of a study of ``size`` on ``dataset`` (shipped generations of that name are imported first)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, not {size!r}")
    layer, probe_layer = target.num_layers, target.num_layers // 2
    epochs = EPOCHS[size]
    steps = []
    shipped = sorted(SHIPPED.glob(f"{dataset}-*.jsonl.gz"))
    if shipped:
        steps.append(_import_step(store, target, dataset, shipped))
    steps += [_chunk_step(store, target, dataset, chunk) for chunk in SIZES[size]]
    from analysis.egtp.training import HeadConfig

    head = HeadConfig(epochs=epochs["head"])
    steps += [
        Step(f"EGTP static heads, all poolings (layer {layer})",
             lambda: store.get_result(ABLATION_KIND, ablation_config(dataset, layer)) is not None
             and _fresh(store, predictor_name(STATIC_KIND, dataset, layer), dataset),
             lambda cb: train_static(store, dataset, layer=layer, config=head, on_progress=cb)),
        Step(f"PLP head (layer {layer})", lambda: _fresh(store, predictor_name(PLP_KIND, dataset, layer), dataset),
             lambda cb: train_plp(store, dataset, layer, config=HeadConfig(epochs=max(2, epochs["head"] // 4),
                                                                            batch_size=64), on_progress=cb)),
        Step(f"attribution (layer {layer}, pooling path)",
             lambda: store.get_result(ATTRIBUTION_KIND, attribution_config(dataset, layer, layer, 1.0)) is not None
             and _fresh(store, predictor_name(STATIC_KIND, dataset, layer), dataset),
             lambda cb: run_attribution(store, dataset, layer, on_progress=cb)),
        Step(f"target probe (layer {probe_layer})",
             lambda: _fresh(store, probe_name(dataset, probe_layer, "regression"), dataset),
             lambda cb: train_probe_job(store, dataset, probe_layer, epochs=epochs["probe"], on_progress=cb)),
    ]
    steps += [Step(f"drafter {variant}", lambda v=variant: _fresh(store, drafter_name(dataset, v), dataset),
                   lambda cb, v=variant: train_drafter_job(store, target, dataset, v, epochs["drafter"],
                                                           on_progress=cb))
              for variant in DRAFTER_VARIANTS]
    steps.append(Step("baselines (SSJF, S3, TRAIL, PiA, LTR)",
                      lambda: all(_fresh(store, baseline_name(b, dataset), dataset) for b in BASELINES),
                      lambda cb: train_baselines(store, dataset, BASELINES, target, on_progress=cb)))
    steps.append(Step("claims", lambda: False, lambda cb: _store_claims(store, dataset, layer, probe_layer)))
    return steps


def _store_claims(store: Store, dataset: str, layer: int, probe_layer: int):
    table = claims_table(store, dataset, layer, probe_layer)
    store.put_result(CLAIMS_KIND, f"claims {dataset}", {"dataset": dataset},
                     {"claims": table.to_dict("records")})
    return table


def run_study(store: Store, target: TargetModel, dataset: str, size: str = "starter",
              on_progress: Progress = no_progress) -> list[tuple[str, str]]:
    """Run every step not done yet; returns (step, status) per step: ``done``, ``skipped`` (stored already) or
    ``not run: why`` (a step that cannot run on this data, e.g. too few uncensored runs). Progress labels name
    the step (``step i/n: ...``); an interruption keeps whatever the steps stored."""
    steps = study_steps(store, target, dataset, size)
    report = []
    for i, step in enumerate(steps, start=1):
        label = f"step {i}/{len(steps)}: {step.name}"
        if step.done():
            report.append((step.name, "skipped"))
            on_progress(i, len(steps), f"{label} (stored)")
            continue
        try:
            step.run(lambda done, total, phase, label=label: on_progress(done, total, f"{label} · {phase}"))
        except ValueError as exc:  # e.g. too few uncensored training runs: say so, go on with the rest
            report.append((step.name, f"not run: {exc}"))
            continue
        report.append((step.name, "done"))
    return report
