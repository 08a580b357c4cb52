"""``lenscope collect``, ``export-generations``, ``import-generations``: datasets of generations with true
lengths, and their tokens as a portable file."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from lenscope.analysis.data.scenarios import LONG_TOKEN_CAP, SCENARIO_SAMPLING, SCENARIOS
from lenscope.cli._common import (
    NOTHING_WRITTEN,
    PhaseBars,
    add_model_args,
    add_ray_args,
    dataset_arg,
    load_target,
    number,
    output_file,
    positive_int,
    ray_options,
)
from lenscope.models.engine import FEATURE_MODES, GENERATION_RANGES
from lenscope.models.numbers import NON_NEGATIVE, POSITIVE_INT

SOURCE_WEIGHT = NON_NEGATIVE
DEFAULT_DATASET = "default"  # where `collect` without --dataset writes (it says so)


def _parse_sources(text: str) -> dict[str, float]:
    try:
        pairs = [part.split("=") for part in text.split(",") if part]
        sources = {name.strip(): float(SOURCE_WEIGHT.parse(weight)) for name, weight in pairs}
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"sources must look like sharegpt=3,humaneval=1, each weight "
                                         f"{SOURCE_WEIGHT.describe()}, not {text!r}") from exc
    if not sources or sum(sources.values()) <= 0:
        raise argparse.ArgumentTypeError(f"give at least one source with a weight above 0, not {text!r}")
    return sources


def _batch_size(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return POSITIVE_INT.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch size must be 'auto' or a positive integer, not {text!r}") from None


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def register(subparsers) -> None:
    p = subparsers.add_parser("collect", help="generate answers for sampled prompts and store true lengths")
    add_model_args(p)
    p.add_argument("--n", type=positive_int, default=200, help="number of prompts")
    p.add_argument("--dataset", type=dataset_arg, default=None,
                   help=f"dataset to store the runs in (default: {DEFAULT_DATASET!r}, and the command says so before "
                        "it starts and where it wrote when it ends)")
    p.add_argument("--sources", type=_parse_sources, default=None,
                   help="prompt sources and weights, e.g. sharegpt=3,humaneval=1 (default; not with --scenario)")
    p.add_argument("--scenario", choices=SCENARIOS, default=None,
                   help="ForeLen-style scenario instead of --sources: chat (ShareGPT first turns), long "
                        "(flattened multi-turn conversations), reasoning (step-by-step math/code), rl "
                        "(math/code sampled 4 times at temperature 1.0)")
    p.add_argument("--max-new-tokens", type=number(GENERATION_RANGES["max_new_tokens"]), default=1024,
                   help="token cap of each answer (an answer cut there is censored: its true length is unknown)")
    p.add_argument("--batch-size", type=_batch_size, default="auto",
                   help="rows sampled at once (default auto: from a memory budget, at most 64 on CPU, 256 on CUDA)")
    p.add_argument("--features", choices=FEATURE_MODES[:2], default="decode",
                   help="features from the batched decode itself (default, fastest) or from one teacher-forced "
                        "pass after each answer")
    p.add_argument("--temperature", type=number(GENERATION_RANGES["temperature"]), default=None,
                   help="sampling temperature (default 0.7; 1.0 for --scenario rl)")
    p.add_argument("--top-p", type=number(GENERATION_RANGES["top_p"]), default=1.0,
                   help="nucleus sampling: sample from the smallest set of tokens whose probability reaches this")
    p.add_argument("--seed", type=number(GENERATION_RANGES["seed"]), default=0,
                   help="seed of the prompt sample and of sampling")
    p.add_argument("--system-prompt", default="default",
                   help="system turn of the chat template: default (the template's own, e.g. SmolLM2's fixed "
                        "24-token preamble), none (an empty system turn) or a text; prompt pooling never covers it")
    p.add_argument("--samples-per-prompt", type=positive_int, default=None,
                   help="answers per prompt (default 1; 4 for --scenario rl)")
    p.add_argument("--max-prompt-chars", type=positive_int, default=2000,
                   help="leave out prompts longer than this many characters")
    p.add_argument("--max-prompt-tokens", type=positive_int, default=None,
                   help=f"token budget of --scenario long prompts (default: at most {LONG_TOKEN_CAP}, leaving "
                        "room for --max-new-tokens in the model's context)")
    add_ray_args(p, "sample")
    p.set_defaults(func=run, writes_store=True)
    e = subparsers.add_parser("export-generations", help="write a dataset's generations (token ids, no features) "
                              "to a .jsonl.gz file")
    e.add_argument("--dataset", type=dataset_arg, required=True, help="store dataset to export")
    e.add_argument("--out", type=output_file, required=True, help="file to write (.jsonl.gz)")
    e.set_defaults(func=export, interrupt_note=NOTHING_WRITTEN)
    i = subparsers.add_parser("import-generations", help="store generations from a .jsonl.gz file, features "
                              "recomputed by one teacher-forced pass (a collection continued afterwards skips them)")
    add_model_args(i)
    i.add_argument("path", type=Path, help="generations file (.jsonl.gz, from export-generations)")
    i.add_argument("--dataset", type=dataset_arg, required=True, help="dataset to store the runs in")
    i.add_argument("--finished-only", action="store_true",
                   help="leave out the runs that hit the token cap (predictors train on finished runs only; "
                        "import again without it to add them)")
    i.add_argument("--censored-answer-tokens", type=positive_int, default=None, metavar="N",
                   help="features of a run that hit the cap over its prompt and first N answer tokens only, as the "
                        "study imports them (up to the last decoding step its predictors are tested on); every answer "
                        "id is kept, and an import without it completes them in place")
    i.set_defaults(func=import_, writes_store=True)


def export(args: argparse.Namespace) -> int:
    from lenscope.jobs.runs.generations import export_generations
    from lenscope.store.store import Store

    with PhaseBars() as bars:
        n = export_generations(Store(), args.dataset, args.out, on_progress=bars)
    print(f"wrote {n} generations of {args.dataset!r} to {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
    return 0


def import_(args: argparse.Namespace) -> int:
    from lenscope.jobs.runs.generations import import_generations
    from lenscope.store.store import Store

    if not args.path.is_file():
        raise FileNotFoundError(f"no generations file at {args.path}")
    target = load_target(args)
    with PhaseBars() as bars:
        imported, known = import_generations(Store(), target, args.path, args.dataset,
                                             finished_only=args.finished_only,
                                             censored_answer_tokens=args.censored_answer_tokens, on_progress=bars)
    print(f"dataset {args.dataset!r}: {imported} runs imported with recomputed features, {known} already stored")
    return 0


def run(args: argparse.Namespace) -> int:
    from lenscope.analysis.data.prompts import sample_prompts
    from lenscope.analysis.data.scenarios import build_scenario, long_token_budget
    from lenscope.jobs.runs.collect import collect_dataset
    from lenscope.models.engine import GenerationSettings
    from lenscope.store.errors import store_location
    from lenscope.store.store import Store

    if args.scenario and args.sources:
        raise ValueError("--sources and --scenario are exclusive: a scenario chooses its own prompts")
    samples, temperature = SCENARIO_SAMPLING.get(args.scenario, (1, 0.7))
    samples = args.samples_per_prompt if args.samples_per_prompt is not None else samples
    temperature = args.temperature if args.temperature is not None else temperature
    if args.scenario is None:
        prompts = sample_prompts(args.n, args.sources or {"sharegpt": 3, "humaneval": 1}, seed=args.seed,
                                 max_chars=args.max_prompt_chars)
    target = load_target(args)
    if args.scenario is not None:
        budget = args.max_prompt_tokens or long_token_budget(target.context_length, args.max_new_tokens)
        prompts = build_scenario(args.scenario, args.n, args.seed, args.max_prompt_chars,
                                 lambda text: len(target.tokenizer(text)["input_ids"]), budget)
    store = Store()
    if args.dataset is None:  # never into 'default' unannounced
        args.dataset = DEFAULT_DATASET
        print(f"note: no --dataset given: collecting into dataset {DEFAULT_DATASET!r} of the store at "
              f"{store_location(store.url)} (name one with --dataset NAME)", file=sys.stderr, flush=True)
    store.check_dataset(args.dataset, target)  # a dataset of another model, a read-only store: one line, no bar
    settings = GenerationSettings(args.max_new_tokens, temperature, args.top_p, args.seed, args.system_prompt)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` (and background jobs, which ignore SIGINT) keep finished runs
    with PhaseBars(prefix=f"collect {args.dataset}") as bars:
        report = collect_dataset(store, target, args.dataset, prompts, settings, samples,
                                 batch_size=args.batch_size, features=args.features, on_progress=bars,
                                 ray=ray_options(args))
    share = f", {report.finished}/{report.generated} ended with end-of-turn" if report.generated else ""
    print(f"dataset {args.dataset!r}: {len(report.run_ids)} runs "
          f"({report.generated} generated, {report.cached} from the cache{share}) in {store_location(store.url)}")
    if report.generated:
        print(f"generated {report.tokens:,} answer tokens in {report.seconds:.0f} s "
              f"({report.tokens_per_s:.1f} tokens/s)")
    return 0
