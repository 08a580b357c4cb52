"""The study as one resumable pipeline: import the shipped generations, collect every scenario, train every
predictor, attribute, and judge the claims; each step is skipped when its result is already stored.

Sizes: ``tiny`` (tests: a handful of prompts, a few tokens), ``starter`` (a first look on two CPU cores) and
``full`` (the >= 2,000-run study of the evaluation issue, whose generations ship in ``data/generations/``).
The collection step samples every chunk's requests together and is done when all of them are stored. On the
model that generated the shipped study, the starter takes a random sample of its prompts instead and imports
their finished answers: one teacher-forced pass costs a third of sampling per token, and answers up to the full
study's cap beat answers cut at a starter's small cap (most of which would be censored).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.splits import FOLDS
from lenscope.analysis.data.scenarios import SCENARIO_SAMPLING, build_scenario, long_token_budget
from lenscope.jobs.drafter.ablation import drafter_ablation, stored_ablation
from lenscope.jobs.drafter.training import (
    ABLATION_DRAFTERS,
    drafter_name,
    drafter_settings,
    probe_name,
    train_drafter_job,
    train_probe_job,
)
from lenscope.jobs.egtp.attribution import attribution_evidence, stored_evidence
from lenscope.jobs.egtp.heads import (
    PLP_KIND,
    STATIC_KIND,
    predictor_name,
    run_attribution,
    stored_attribution,
    stored_pooling_ablation,
    train_plp,
    train_static,
)
from lenscope.jobs.predictors.baselines import BASELINES, baseline_name, train_baselines
from lenscope.jobs.results.claims import claims_report, dataset_predictors, stored_claims
from lenscope.jobs.results.crossval import CENSORED_ANSWER_TOKENS, cv_runs, runs_digest
from lenscope.jobs.runs.collect import (
    Request,
    collect_requests,
    collection_requests,
    missing_from_dataset,
    missing_runs,
)
from lenscope.jobs.runs.datasets import predictor_fresh
from lenscope.jobs.runs.generations import (
    generated_by,
    import_generations,
    import_records,
    read_generations,
    read_header,
    record_keys,
    sample_prompts_of,
)
from lenscope.jobs.runs.ray_cluster import RayOptions
from lenscope.jobs.scheduler.replay import PredictorSpec, dataset_trace, outlets_preset
from lenscope.jobs.study.results import PRESET_KIND, preset_config, stored_preset
from lenscope.models.engine import GenerationSettings
from lenscope.models.target import TargetModel
from lenscope.store.settings import CHECKOUT, SHIPPED_DATA
from lenscope.store.store import Store

SHIPPED = SHIPPED_DATA / "generations"
# The drafter variants each size trains: the starter only the OUTLETS drafter (the ablations need the full study).
# The ablations train after the claims, which do not read them.
STUDY_DRAFTERS = {"tiny": ("outlets", *ABLATION_DRAFTERS), "starter": ("outlets",),
                  "full": ("outlets", *ABLATION_DRAFTERS)}


@dataclass(frozen=True)
class Chunk:
    """One collection of the study: ``n`` prompts of a scenario drawn with ``seed`` at a token cap; samples and
    temperature come from the scenario (4 at T = 1.0 for rl, 1 at T = 0.7 otherwise), sampled with seeds 0..K-1.
    A prompt drawn by two chunks of the same settings is one run, found in the store by the second."""

    scenario: str
    n: int
    max_new_tokens: int
    seed: int = 0


SIZES = {
    "tiny": (Chunk("chat", 10, 48), Chunk("reasoning", 2, 16), Chunk("rl", 1, 16)),
    "starter": (Chunk("chat", 120, 256), Chunk("reasoning", 6, 256), Chunk("rl", 2, 256), Chunk("long", 4, 256)),
    "full": (Chunk("chat", 1400, 1024), Chunk("reasoning", 104, 1024), Chunk("rl", 105, 1024),
             Chunk("chat", 1200, 1024, seed=1), Chunk("long", 150, 1024)),
}


@dataclass(frozen=True)
class ShippedSample:
    """A sample of a shipped study: ``prompts[scenario]`` prompts per scenario drawn at random (``seed``) from
    ``file`` in ``data/generations/``, every finished answer of theirs imported with features recomputed."""

    file: str
    prompts: dict
    seed: int = 0

    def text(self) -> str:
        """E.g. ``the finished answers of 124 prompts drawn from the shipped study: chat 110, rl 3 x 4, ...``."""
        parts = ", ".join(f"{scenario} {n}" + (f" x {SCENARIO_SAMPLING[scenario][0]}"
                                               if SCENARIO_SAMPLING[scenario][0] > 1 else "")
                          for scenario, n in self.prompts.items())
        return f"the finished answers of {sum(self.prompts.values())} prompts drawn from the shipped study: {parts}"


# Sizes that import a sample of a shipped study when the loaded model generated it (else they collect their
# chunks). The starter's sample: 91 finished answers, 35,615 prompt and answer tokens.
SHIPPED_SAMPLES = {"starter": ShippedSample("study-generations.jsonl.gz",
                                            {"chat": 110, "reasoning": 8, "rl": 3, "long": 3})}
PUBLISHED_SIZE = "full"  # the study whose results and predictors ship with the repository


def study_dataset(size: str) -> str:
    """The dataset a study of ``size`` fills unless told otherwise: ``study`` for full, else the size's name."""
    return "study" if size == "full" else size




# Sizes whose predictors train and score on censored runs too: the tiny study's few dozen tokens finish almost
# no answer, and it only proves that every step runs end to end (its numbers mean nothing).
TRAINS_ON_CENSORED = ("tiny",)
# Training seeds of the claims' cross-validation per size (the starter's first look: one seed, said in its caption).
CV_SEEDS = {"tiny": 1, "starter": 1, "full": 3}
# Training epochs per size (the tiny study only proves the pipeline runs end to end). The full drafter's 4 epochs
# over ~2,000 runs are more optimiser steps than the 6 over the chat chunk's 964 that it replaces.
EPOCHS = {"tiny": {"head": 2, "drafter": 1, "probe": 2}, "starter": {"head": 40, "drafter": 3, "probe": 20},
          "full": {"head": 60, "drafter": 4, "probe": 30}}


@dataclass
class Step:
    """A pipeline step: a short ``phase`` id (what ``benchmark rebuild --phases`` names), its name, whether its
    result is stored already, and how to run it."""

    phase: str
    name: str
    done: Callable[[], bool]
    run: Callable[[Progress], object]


def _collect_step(store: Store, target: TargetModel, dataset: str, chunks: Sequence[Chunk],
                  ray: RayOptions | None) -> Step:
    """One collection of every chunk's requests: they share the engine's batches, so small chunks (a few
    reasoning or long prompts) cost little beside a large one."""

    @cache
    def requests() -> list[Request]:
        out = []
        for chunk in chunks:
            samples, temperature = SCENARIO_SAMPLING[chunk.scenario]
            budget = long_token_budget(target.context_length, chunk.max_new_tokens)
            prompts = build_scenario(chunk.scenario, chunk.n, chunk.seed, 2000,
                                     lambda text: len(target.tokenizer(text)["input_ids"]), budget)
            out += collection_requests(prompts, GenerationSettings(chunk.max_new_tokens, temperature, 1.0, 0), samples)
        return out

    def run(on_progress: Progress):
        config = {"chunks": [asdict(chunk) for chunk in chunks]}
        return collect_requests(store, target, dataset, requests(), config, on_progress=on_progress, ray=ray)

    return Step("collect", f"collect {collection_text(chunks)}",
                lambda: missing_runs(store, target, dataset, requests()) == 0, run)


def shipped_sample(target: TargetModel, size: str) -> ShippedSample | None:
    """The shipped sample a study of ``size`` imports on ``target``, or None (it collects its chunks)."""
    sample = SHIPPED_SAMPLES.get(size)
    if sample is None or not (SHIPPED / sample.file).exists():
        return None
    return sample if generated_by(read_header(SHIPPED / sample.file), target) else None


def _sample_step(store: Store, target: TargetModel, dataset: str, sample: ShippedSample) -> Step:
    """Import the finished answers of the sample's prompts into ``dataset`` (done when all are in it)."""

    @cache
    def records() -> tuple[dict, list[dict], int]:
        """The file's header, the drawn prompts' finished records, and how many of their answers hit the cap."""
        header, records = read_generations(SHIPPED / sample.file)
        drawn = sample_prompts_of(records, sample.prompts, sample.seed)
        finished = [r for r in drawn if r["finished"]]
        return header, finished, len(drawn) - len(finished)

    def done() -> bool:
        header, chosen, _ = records()
        keys = record_keys(store, target, chosen, target.check_layers(header.get("layers")))
        return missing_from_dataset(store, dataset, keys) == 0

    def run(on_progress: Progress):
        header, chosen, censored = records()
        return import_records(store, target, sample.file, header, chosen, dataset, censored_left_out=censored,
                              on_progress=on_progress)

    return Step("import", f"import {sample.text()}", done, run)


def collection_text(chunks: Sequence[Chunk]) -> str:
    """What a size collects, e.g. ``chat 120, rl 2 x 4 (cap 256)``: prompts per scenario, samples when more
    than one, and the token cap(s)."""
    parts = []
    for c in chunks:
        samples = SCENARIO_SAMPLING[c.scenario][0]
        parts.append(f"{c.scenario} {c.n}" + (f" x {samples}" if samples > 1 else "")
                     + (f" (seed {c.seed})" if c.seed else ""))
    caps = sorted({c.max_new_tokens for c in chunks})
    return f"{', '.join(parts)} (cap {'/'.join(map(str, caps))})"


def _import_step(store: Store, target: TargetModel, dataset: str, files: list[Path], censored_answer_tokens: int | None
                 ) -> Step:
    """Import the shipped generations files (a censored run's features up to ``censored_answer_tokens``, see
    :func:`import_records`)."""
    def run(on_progress: Progress):
        return [import_generations(store, target, path, dataset, censored_answer_tokens=censored_answer_tokens,
                                   on_progress=on_progress) for path in files]

    return Step("import", f"import {len(files)} shipped generations file(s)", lambda: False, run)


def study_steps(store: Store, target: TargetModel, dataset: str, size: str = "starter",
                collect: bool = True, ray: RayOptions | None = None) -> list[Step]:
    """The steps of a study of ``size`` on ``dataset`` (shipped generations of that name are imported first);
    ``collect=False`` leaves out importing and collecting: train and judge on the runs stored now; ``ray``
    collects on a Ray cluster."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, not {size!r}")
    layer, probe_layer = target.num_layers, target.num_layers // 2
    epochs = EPOCHS[size]
    steps = []
    shipped = sorted(SHIPPED.glob(f"{dataset}-*.jsonl.gz"))
    if shipped and collect:
        steps.append(_import_step(store, target, dataset, shipped,
                                  None if size in TRAINS_ON_CENSORED else CENSORED_ANSWER_TOKENS))
    if collect:
        sample = shipped_sample(target, size)
        steps.append(_sample_step(store, target, dataset, sample) if sample
                     else _collect_step(store, target, dataset, SIZES[size], ray))
    from lenscope.analysis.egtp.training import HeadConfig

    head = HeadConfig(epochs=epochs["head"])
    censored = size in TRAINS_ON_CENSORED

    def fresh(name: str, settings: dict | None = None) -> bool:
        return predictor_fresh(store, name, dataset, censored, settings)

    steps += [
        Step("heads", f"EGTP static heads, all poolings (layer {layer})",
             lambda: stored_pooling_ablation(store, dataset, layer) is not None
             and fresh(predictor_name(STATIC_KIND, dataset, layer)),
             lambda cb: train_static(store, dataset, layer=layer, config=head, include_censored=censored,
                                     on_progress=cb)),
        Step("plp", f"PLP head (layer {layer})", lambda: fresh(predictor_name(PLP_KIND, dataset, layer)),
             lambda cb: train_plp(store, dataset, layer, config=HeadConfig(epochs=max(2, epochs["head"] // 4),
                                                                            batch_size=64),
                                  include_censored=censored, on_progress=cb)),
        Step("attribution", f"attribution (layer {layer}, pooling path)",
             lambda: stored_attribution(store, dataset, layer, layer, 1.0) is not None
             and fresh(predictor_name(STATIC_KIND, dataset, layer)),
             lambda cb: run_attribution(store, dataset, layer, include_censored=censored, on_progress=cb)),
        Step("evidence", f"attribution evidence (layer {layer}, learned attention head: measures x controls)",
             lambda: stored_evidence(store, dataset, layer) is not None,
             lambda cb: attribution_evidence(store, dataset, layer, epochs=epochs["head"], include_censored=censored,
                                             on_progress=cb)),
        Step("probe", f"target probe (layer {probe_layer})",
             lambda: fresh(probe_name(dataset, probe_layer, "regression")),
             lambda cb: train_probe_job(store, dataset, probe_layer, epochs=epochs["probe"],
                                        include_censored=censored, on_progress=cb)),
    ]
    drafters = [Step(f"drafter:{variant}", f"drafter {variant}",
                     lambda v=variant: fresh(drafter_name(dataset, v), drafter_settings(target)),
                     lambda cb, v=variant: train_drafter_job(store, target, dataset, v, epochs["drafter"],
                                                             include_censored=censored, on_progress=cb))
                for variant in STUDY_DRAFTERS[size]]
    steps.append(drafters[0])  # the OUTLETS drafter: the claims and the scheduler preset read it
    steps.append(Step("baselines", "baselines (SSJF, S3, TRAIL, PiA, LTR)",
                      lambda: all(fresh(baseline_name(b, dataset)) for b in BASELINES),
                      lambda cb: train_baselines(store, dataset, BASELINES, target, include_censored=censored,
                                                 on_progress=cb)))
    steps.append(Step("preset", "scheduler preset (OUTLETS drafter's test-split predictions beside the oracle and a "
                      "constant, 1 prefill + 3 decode, uniform and decode-bound workloads over seeds)",
                      lambda: stored_preset(store, dataset) is not None,
                      lambda cb: run_preset(store, dataset, censored, on_progress=cb)))
    seeds = CV_SEEDS[size]
    steps.append(Step("claims", f"claims ({FOLDS}-fold cross-validation, {seeds} training seed{'s' * (seeds > 1)})",
                      lambda: _claims_fresh(store, dataset, seeds),
                      lambda cb: claims_report(store, dataset, layer, probe_layer, FOLDS, seeds, target,
                                               epochs["head"], epochs["probe"], on_progress=cb)))
    ablation = Step("ablation", "drafter ablation (the variants beside probes that see what the drafter sees)",
                    lambda: stored_ablation(store, dataset) is not None,
                    lambda cb: drafter_ablation(store, dataset, layer, epochs["probe"], censored, on_progress=cb))
    steps += drafters[1:] + [ablation]  # the drafter ablations last: the claims do not read them
    return steps + (_publish_steps(store, target, dataset) if size == PUBLISHED_SIZE else [])


def _publish_steps(store: Store, target: TargetModel, dataset: str) -> list[Step]:
    """The full study's last steps: live speculative decoding on held-out prompts, then its results and trained
    predictors written as the small files the repository ships (``data/results``, ``data/predictors``; in a
    checkout only)."""
    from lenscope.jobs.drafter.live import speculative_job, stored_measurement
    from lenscope.jobs.predictors.catalog import ship_predictors, shipped_fresh
    from lenscope.jobs.predictors.predict import interval_metrics
    from lenscope.jobs.study.results import StoreResults
    from lenscope.jobs.study.shipped import publish_results, published_fresh

    live = Step("live", "live speculative decoding (held-out prompts, acceptance per drafting step)",
                lambda: stored_measurement(store, dataset) is not None,
                lambda cb: speculative_job(store, target, dataset, on_progress=cb))
    if not CHECKOUT:  # an installed copy's shipped data stays as installed (`publish-results --out` writes elsewhere)
        return [live]
    return [
        live,
        Step("publish", "publish the results (data/results) and ship the predictors (data/predictors)",
             lambda: published_fresh(StoreResults(store, dataset)) and shipped_fresh(store, dataset),
             lambda cb: (publish_results(StoreResults(store, dataset), target),
                         ship_predictors(store, dataset, extra_metrics=interval_metrics(store, dataset)))),
    ]


def _claims_fresh(store: Store, dataset: str, seeds: int) -> bool:
    """Claims are stored for the dataset's runs as they are now, with these folds and seeds, and judged after the
    OUTLETS drafter they read was last trained."""
    config = (stored_claims(store, dataset) or {}).get("config") or {}
    wanted = {"folds": FOLDS, "seeds": seeds, "runs": runs_digest(cv_runs(store, dataset)),
              "drafter": dataset_predictors(store, dataset).get(drafter_name(dataset, "outlets"))}
    return all(config.get(k) == v for k, v in wanted.items())


def run_preset(store: Store, dataset: str, include_censored: bool = False,
               on_progress: Progress = no_progress) -> dict:
    """The OUTLETS serving preset (RR+FCFS, RR+SJF, LB+SJF) on the dataset's test-split runs with the OUTLETS
    drafter's out-of-sample predictions, the oracle and the training median as a constant on the same requests, over
    the preset's seeds, for every workload. Stores and returns per workload its note and per-seed rows, and the
    drafter's mean short-request P99 changes vs RR+FCFS on the uniform one (``changes``)."""
    config = preset_config(store, dataset)
    if config["predictor_id"] is None:
        raise ValueError(f"no OUTLETS drafter trained on {dataset!r} yet")
    return store.memo(PRESET_KIND, config,
                      lambda: _preset_payload(store, dataset, config, include_censored, on_progress),
                      name=f"scheduler preset {dataset}", refresh=True)


def _preset_payload(store: Store, dataset: str, config: dict, include_censored: bool, on_progress: Progress) -> dict:
    from lenscope.jobs.scheduler.replay import training_median

    trace = dataset_trace(store, dataset, qps=1.0, split="test", include_censored=include_censored)
    spec = PredictorSpec(kind="stored", predictor_id=config["predictor_id"])
    constant = training_median(store, dataset, include_censored)
    workloads, seeds = {}, config["seeds"]
    for k, workload in enumerate(config["workloads"]):
        def progress(done: int, _total: int, phase: str, k: int = k, workload: str = workload) -> None:
            on_progress(k * seeds + done, len(config["workloads"]) * seeds, f"{workload} workload: {phase}")

        outcome = outlets_preset(store, trace, spec, seeds=seeds, workload=workload, constant=constant,
                                 on_progress=progress)
        workloads[workload] = {"note": outcome.note, "changes": outcome.changes,
                               "per_seed": outcome.per_seed.to_dict(orient="list")}
    uniform = workloads[config["workloads"][0]]
    return {"changes": uniform["changes"], "note": uniform["note"], "test_runs": len(trace),
            "predictor": spec.label(), "constant": constant, "workloads": workloads}


def study_checklist(store: Store, target: TargetModel, dataset: str, size: str = "starter") -> list[tuple[str, bool]]:
    """(step, stored already) for every step of the study, in order (what the home page lists)."""
    return [(step.name, _done(step)) for step in study_steps(store, target, dataset, size)]


def _done(step: Step) -> bool:
    try:
        return bool(step.done())
    except ValueError:  # e.g. the dataset has no runs yet
        return False


def run_study(store: Store, target: TargetModel, dataset: str, size: str = "starter",
              on_progress: Progress = no_progress, collect: bool = True,
              ray: RayOptions | None = None) -> list[tuple[str, str]]:
    """Run every step not done yet; returns (step, status) per step: ``done``, ``skipped`` (stored already) or
    ``not run: why`` (a step that cannot run on this data, e.g. too few uncensored runs). Progress labels name
    the step (``step i/n: ...``); an interruption keeps whatever the steps stored."""
    store.require_writable(f"the study into {dataset!r}")  # before any work, not after it
    steps = study_steps(store, target, dataset, size, collect, ray)
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
