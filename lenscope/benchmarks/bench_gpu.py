"""GPU check: collection vs HF ``generate``, the study import, drafter training, live speculative decoding.

The four are timed on one device in one run: under 8 minutes on an H100, a few on a CPU (``--device cpu --quick``).

Sections (one that fails prints its error and the others still run):
- collection: the batched engine (features from the decode) and HF ``generate`` (no features) on the same ShareGPT
  chat prompts of the study file (<= 1,000 characters), T = 0.7: answer tokens/s (``bench_collect``'s (b) and (c));
- import: the study's generations into a temporary store, every feature recomputed (the whole file; ``--quick``: a
  few training runs): prompt + answer tokens/s;
- drafter: training steps/s of a fresh OUTLETS drafter on imported training runs (4 runs a step, the device's
  training-time-test steps); the first step is a warm-up;
- speculative: the shipped OUTLETS drafter's greedy speculative decoding of the study's held-out prompts vs plain
  greedy decoding: speedup, tau and acceptance per drafting step (``bench_drafter.decode_speeds``).
The import and the drafter stop at their time budget (their figures cover what ran). Each section prints a table
row with the device's name, ``--out`` gets every figure as JSON, the last line sums up (``gpu check on DEVICE:
...``), and the exit code is 1 when a section failed.

Usage: python -m lenscope benchmark gpu [--device cuda|cpu] [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from itertools import cycle, islice
from pathlib import Path

import pandas as pd
import torch
import transformers

from lenscope.analysis.drafter.acceptance import DRAFT_STEPS
from lenscope.analysis.drafter.training import get_variant, train_drafter
from lenscope.benchmarks.bench_collect import engine_run, hf_generate, sampling, timed
from lenscope.benchmarks.bench_drafter import decode_speeds
from lenscope.benchmarks.records import Number, Numbers
from lenscope.jobs.drafter.training import drafter_settings, load_examples
from lenscope.jobs.predictors.catalog import shipped_predictor
from lenscope.jobs.runs.datasets import with_splits
from lenscope.jobs.runs.generations import import_generations, import_records, read_generations
from lenscope.models.atomic_files import write_text
from lenscope.models.drafter import Drafter
from lenscope.models.target import TargetModel, device_name
from lenscope.store.settings import SHIPPED_DATA, sqlite_url
from lenscope.store.store import Store

STUDY_FILE = SHIPPED_DATA / "generations" / "study-generations.jsonl.gz"
STUDY, DRAFTER_RUNS = "gpu-check", "gpu-check-drafter"  # datasets of the temporary store
RUNS_PER_STEP = 4
MAX_PROMPT_CHARS = 1000
# Seconds the import and the drafter may run before they stop (the H200 imported the whole study in 87 s).
BUDGETS = {"import": 150.0, "drafter": 60.0}


@dataclass(frozen=True)
class Sizes:
    """How much each section does: collection prompts, answer cap and batch; study runs imported (None: all);
    drafter training steps; held-out prompts decoded speculatively and their answer cap."""

    prompts: int
    new_tokens: int
    batch: int
    runs: int | None
    steps: int
    spec_prompts: int
    spec_tokens: int


FULL = Sizes(prompts=128, new_tokens=128, batch=64, runs=None, steps=50, spec_prompts=8, spec_tokens=64)
QUICK = Sizes(prompts=16, new_tokens=32, batch=16, runs=8, steps=5, spec_prompts=4, spec_tokens=48)


class OverBudget(Exception):
    """A section ran past its time budget; what it finished is measured."""


@dataclass
class Budget:
    """A section's time budget: :meth:`check` raises :class:`OverBudget` once ``seconds`` have passed."""

    seconds: float
    start: float = field(default_factory=time.perf_counter)

    def check(self) -> None:
        if time.perf_counter() - self.start > self.seconds:
            raise OverBudget


@dataclass
class Check:
    """What every section reads: the target, the study file's records with their split, the temporary store."""

    target: TargetModel
    header: dict
    records: list[dict]
    splits: list[str]
    store: Store
    sizes: Sizes


def study_splits(records: list[dict]) -> list[str]:
    """The study's split of each record (fold 0 of its leak groups, as the shipped predictors were trained)."""
    frame = pd.DataFrame({"source": [r["source"] for r in records], "source_ref": [r["ref"] for r in records],
                          "prompt": [r["prompt"] for r in records], "finished": [r["finished"] for r in records]})
    return with_splits(frame)["split"].tolist()


def chat_prompts(records: list[dict], n: int) -> list[list[int]]:
    """Token ids of ``n`` distinct ShareGPT chat prompts of at most :data:`MAX_PROMPT_CHARS` characters (seed 0)."""
    pool = {r["prompt"]: r["prompt_ids"] for r in records
            if r["scenario"] == "chat" and r["source"] == "sharegpt" and len(r["prompt"]) <= MAX_PROMPT_CHARS}
    return random.Random(0).sample(list(pool.values()), min(n, len(pool)))


def training_runs(records: list[dict], splits: list[str], n: int) -> list[dict]:
    """``n`` finished training-split records in a fixed shuffled order (a smaller ``n`` takes a prefix)."""
    pool = [r for r, s in zip(records, splits) if s == "train" and r["finished"] and r["output_ids"]]
    random.Random(0).shuffle(pool)
    return pool[:n]


def held_out(records: list[dict], splits: list[str], n: int) -> list[list[int]]:
    """Token ids of the first ``n`` distinct test-split prompts, in file order."""
    prompts = {r["prompt"]: r["prompt_ids"] for r, s in zip(records, splits) if s == "test"}
    return list(prompts.values())[:n]


def collection(check: Check, budget: Budget) -> dict:
    """Engine and HF ``generate`` tokens/s on the same prompts and device, after an untimed warm-up of both."""
    target, sizes = check.target, check.sizes
    prompts, layers = chat_prompts(check.records, sizes.prompts), target.default_layers()
    settings, per_row = sampling(sizes.new_tokens, len(prompts))
    warm_settings, warm_rows = sampling(4, 2)
    engine_run(target, layers, 2, "decode", prompts[:2], warm_rows)
    hf_generate(target, prompts[:2], warm_settings, 2)
    result, engine_s = timed(lambda: engine_run(target, layers, sizes.batch, "decode", prompts, per_row))
    (hf_tokens, waste), hf_s = timed(lambda: hf_generate(target, prompts, settings, sizes.batch))
    engine_tokens = sum(g.output_length for g in result.values())
    rate = engine_tokens / engine_s
    return {"prompts": len(prompts), "new_tokens": sizes.new_tokens, "batch": sizes.batch,
            "engine_tokens": engine_tokens, "engine_seconds": engine_s, "engine_tokens_per_s": rate,
            "hf_tokens": hf_tokens, "hf_seconds": hf_s, "hf_wasted_row_steps": waste,
            "hf_tokens_per_s": hf_tokens / hf_s, "vs_hf": rate / (hf_tokens / hf_s),
            "details": f"{len(prompts)} prompts x {sizes.new_tokens} new tokens, batch {sizes.batch}: engine "
                       f"{engine_tokens:,} tokens in {engine_s:.1f} s, HF generate {hf_tokens:,} in {hf_s:.1f} s "
                       f"({waste:,} wasted row-steps)"}


def study_import(check: Check, budget: Budget) -> dict:
    """The study file (or ``sizes.runs`` training runs of it) imported into the temporary store, features recomputed."""
    target, runs = check.target, check.sizes.runs
    todo = check.records if runs is None else training_runs(check.records, check.splits, runs)
    done = [0]

    def progress(n: int, total: int, label: str) -> None:
        done[0] = n
        budget.check()

    start, stopped = time.perf_counter(), False
    try:
        if runs is None:
            import_generations(check.store, target, STUDY_FILE, STUDY, on_progress=progress)
        else:
            import_records(check.store, target, STUDY_FILE.name, check.header, todo, STUDY, on_progress=progress)
    except OverBudget:
        stopped = True
    seconds = time.perf_counter() - start
    tokens = sum(len(r["prompt_ids"]) + len(r["output_ids"]) for r in todo[:done[0]])
    return {"runs": done[0], "of": len(todo), "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "stopped_at_budget": stopped,
            "details": f"{done[0]:,} of {len(todo):,} runs, {tokens:,} prompt + answer tokens in {seconds:.1f} s"
                       + (f" (stopped at its {budget.seconds:.0f} s budget)" if stopped else "")}


def drafter_training(check: Check, budget: Budget) -> dict:
    """Steps/s of a fresh OUTLETS drafter trained on imported training runs (imported now if the import did not
    reach them), measured from the end of the first step."""
    target, steps = check.target, check.sizes.steps
    if steps < 2:
        raise ValueError(f"the drafter needs at least 2 steps to time one after its warm-up, not {steps}")
    spec, settings = get_variant("outlets"), drafter_settings(target)
    torch.manual_seed(0)
    drafter = Drafter.for_target(target, **spec.drafter_overrides(), draft_vocab_size=settings["draft_vocab_size"])
    wanted = RUNS_PER_STEP * steps
    runs = training_runs(check.records, check.splits, min(wanted, check.sizes.runs or wanted))
    import_records(check.store, target, STUDY_FILE.name, check.header, runs, DRAFTER_RUNS)
    examples, load_s = timed(lambda: load_examples(check.store, target, DRAFTER_RUNS, drafter.config.fuse_layers))
    marks: list[float] = []

    def on_step(step: int, total: int, parts: dict[str, float]) -> None:
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)
        marks.append(time.perf_counter())
        budget.check()

    stopped = False
    try:
        train_drafter(drafter, list(islice(cycle(examples), wanted)), spec, epochs=1, runs_per_step=RUNS_PER_STEP,
                      ttt_steps=settings["ttt_steps"], device=target.device, on_step=on_step)
    except OverBudget:
        stopped = True
    if len(marks) < 2:
        raise OverBudget(f"only {len(marks)} step within the {budget.seconds:.0f} s budget")
    rate = (len(marks) - 1) / (marks[-1] - marks[0])
    tokens = sum(ex.length for ex in examples) / len(examples)
    return {"steps": len(marks), "runs": len(examples), "run_tokens_mean": tokens, "runs_per_step": RUNS_PER_STEP,
            "ttt_steps": settings["ttt_steps"], "load_seconds": load_s, "steps_per_s": rate,
            "stopped_at_budget": stopped,
            "details": f"{len(marks)} steps of {RUNS_PER_STEP} runs (TTT {settings['ttt_steps']}; {len(examples)} "
                       f"distinct runs of {tokens:.0f} tokens on average, loaded in {load_s:.1f} s), the first a "
                       "warm-up"
                       + (f"; stopped at its {budget.seconds:.0f} s budget" if stopped else "")}


def speculative(check: Check, budget: Budget) -> dict:
    """The shipped OUTLETS drafter's speculative decoding vs plain greedy decoding of held-out prompts."""
    files = shipped_predictor("drafter")
    drafter = Drafter.load_for_target(files.path, check.target)
    prompts = held_out(check.records, check.splits, check.sizes.spec_prompts)
    result = decode_speeds(check.target, drafter, prompts, check.sizes.spec_tokens, DRAFT_STEPS)
    shown = ", ".join("-" if a is None else f"{a:.2f}" for a in result["acceptance"])
    return {**result, "max_new_tokens": check.sizes.spec_tokens, "k": DRAFT_STEPS,
            "drafter_ttt_steps": files.manifest["config"].get("ttt_steps"),
            "details": f"{result['prompts']} held-out prompts x {check.sizes.spec_tokens} new tokens, "
                       f"k = {DRAFT_STEPS}: {result['speculative_tokens_per_s']:.1f} vs "
                       f"{result['plain_tokens_per_s']:.1f} tokens/s, "
                       f"acceptance per step {shown}, {result['identical']} of {result['prompts']} answers identical"}


SECTIONS: dict[str, Callable[[Check, Budget], dict]] = {
    "collection": collection, "import": study_import, "drafter": drafter_training, "speculative": speculative}
HEADLINES: dict[str, Callable[[dict], str]] = {
    "collection": lambda r: f"{r['engine_tokens_per_s']:.1f} tok/s ({r['vs_hf']:.2f}x HF generate)",
    "import": lambda r: f"{r['tokens_per_s']:.0f} tok/s",
    "drafter": lambda r: f"{r['steps_per_s']:.2f} steps/s",
    "speculative": lambda r: f"{r['speedup']:.2f}x plain (tau {r['tau']:.2f})"}


# Each section's figures: (section, key in its result, figure name, unit, what it is).
FIGURES = (("collection", "engine_tokens_per_s", "collection_engine_tokens_per_s", "tokens/s",
            "the batched engine's answer tokens/s, features from the decode"),
           ("collection", "hf_tokens_per_s", "collection_hf_tokens_per_s", "tokens/s",
            "HF generate's answer tokens/s, no features"),
           ("collection", "vs_hf", "collection_vs_hf", "x", "the engine's tokens/s over HF generate's"),
           ("import", "tokens_per_s", "import_tokens_per_s", "tokens/s",
            "the study import's prompt + answer tokens/s, features recomputed"),
           ("import", "runs", "import_runs", "runs", "study runs imported within the budget"),
           ("drafter", "steps_per_s", "drafter_steps_per_s", "steps/s", "OUTLETS drafter training steps a second"),
           ("speculative", "speedup", "speculative_speedup", "x", "speculative over plain greedy decoding"),
           ("speculative", "tau", "speculative_tau", "tokens", "tokens a target step yields speculatively"))


def figures(load_s: float, results: dict[str, dict]) -> Numbers:
    """The headline figures of the sections that ran, and the model's load time."""
    return {"load_s": Number(load_s, "s", "loading the target model")} | {
        name: Number(results[section][key], unit, what) for section, key, name, unit, what in FIGURES
        if section in results}


def summary_line(device: str, results: dict[str, dict]) -> str:
    """The last line: each section's headline figure, or ``failed``."""
    parts = [f"{name} {HEADLINES[name](results[name]) if name in results else 'failed'}" for name in SECTIONS]
    return f"gpu check on {device}: " + ", ".join(parts)


def table_row(section: str, device: str, headline: str, details: str, seconds: float) -> str:
    """One section's row of the printed table."""
    return f"| {section} | {device} | {headline} | {details} | {seconds:.1f} |"


def run_sections(check: Check, device: str) -> tuple[dict[str, dict], dict[str, str]]:
    """Every section in turn, each printed as a table row: (results, errors of the failed ones)."""
    results, failed = {}, {}
    print("\n| section | device | result | details | seconds |\n|---|---|---|---|---|", flush=True)
    for name, section in SECTIONS.items():
        start = time.perf_counter()
        try:
            results[name] = section(check, Budget(BUDGETS.get(name, float("inf"))))
        except Exception as exc:  # a failed section is reported; the others still run
            traceback.print_exc()
            failed[name] = f"{type(exc).__name__}: {exc}"
            print(table_row(name, device, "FAILED", failed[name], time.perf_counter() - start), flush=True)
            continue
        results[name]["seconds"] = time.perf_counter() - start
        print(table_row(name, device, HEADLINES[name](results[name]), results[name]["details"],
                        results[name]["seconds"]), flush=True)
    return results, failed


def options(argv: list[str] | None) -> tuple[argparse.Namespace, Sizes]:
    """The parsed arguments and the sizes: ``--quick``'s or the full ones, each size settable alone (hidden
    options ``--prompts``, ``--new-tokens``, ...; the test uses the smallest)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto (CUDA when present)")
    parser.add_argument("--quick", action="store_true", help="a few minutes on a CPU: small sizes, a few runs imported")
    parser.add_argument("--out", type=Path, help="write every figure to this JSON file")
    names = [f.name for f in fields(Sizes)]
    for name in names:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    return args, replace(QUICK if args.quick else FULL, **given)


def main(argv: list[str] | None = None) -> Numbers:
    args, sizes = options(argv)
    start = time.perf_counter()
    target, load_s = timed(lambda: TargetModel.load(device=args.device))
    device = device_name(target.device)
    header, records = read_generations(STUDY_FILE)
    print(f"model {target.source.spec} on {device} ({target.device.type}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}), loaded in {load_s:.1f} s; {asdict(sizes)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="lenscope-gpu-check-") as folder:
        store = Store(sqlite_url(Path(folder) / "lenscope.db"), Path(folder) / "tensors")
        check = Check(target, header, records, study_splits(records), store, sizes)
        results, failed = run_sections(check, device)
    summary = summary_line(device, results)
    if args.out:
        payload = {"device": target.device.type, "device_name": device, "torch": torch.__version__,
                   "transformers": transformers.__version__, "sizes": asdict(sizes), "budgets": BUDGETS,
                   "load_seconds": load_s, "wall_seconds": time.perf_counter() - start, "sections": results,
                   "failed": failed, "summary": summary}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_text(args.out, json.dumps(payload, indent=2) + "\n")
    print(summary, flush=True)
    if failed:
        raise SystemExit(1)
    return figures(load_s, results)


if __name__ == "__main__":
    main()
