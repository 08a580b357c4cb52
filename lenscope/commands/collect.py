"""``lenscope collect``: build a dataset of generations with true lengths."""

from __future__ import annotations

import argparse

from analysis.scenarios import LONG_TOKEN_CAP, SCENARIO_SAMPLING, SCENARIOS
from lenscope.commands._common import add_model_args, load_target, progress_bar


def _parse_sources(text: str) -> dict[str, float]:
    try:
        pairs = [part.split("=") for part in text.split(",") if part]
        return {name.strip(): float(weight) for name, weight in pairs}
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"sources must look like sharegpt=3,humaneval=1, not {text!r}") from exc


def register(subparsers) -> None:
    p = subparsers.add_parser("collect", help="generate answers for sampled prompts and store true lengths")
    add_model_args(p)
    p.add_argument("--n", type=int, default=200, help="number of prompts")
    p.add_argument("--dataset", default="default", help="dataset name")
    p.add_argument("--sources", type=_parse_sources, default=None,
                   help="prompt sources and weights, e.g. sharegpt=3,humaneval=1 (default; not with --scenario)")
    p.add_argument("--scenario", choices=SCENARIOS, default=None,
                   help="ForeLen-style scenario instead of --sources: chat (ShareGPT first turns), long "
                        "(flattened multi-turn conversations), reasoning (step-by-step math/code), rl "
                        "(math/code sampled 4 times at temperature 1.0)")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature (default 0.7; 1.0 for --scenario rl)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples-per-prompt", type=int, default=None,
                   help="answers per prompt (default 1; 4 for --scenario rl)")
    p.add_argument("--max-prompt-chars", type=int, default=2000)
    p.add_argument("--max-prompt-tokens", type=int, default=None,
                   help=f"token budget of --scenario long prompts (default: at most {LONG_TOKEN_CAP}, leaving "
                        "room for --max-new-tokens in the model's context)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analysis.prompts import sample_prompts
    from analysis.scenarios import build_scenario, long_token_budget
    from cache.store import Store
    from lenscope.collect import collect_dataset
    from models.target import GenerationSettings

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
    settings = GenerationSettings(args.max_new_tokens, temperature, args.top_p, args.seed)
    with progress_bar(len(prompts) * samples, f"collect {args.dataset}") as bar:
        def step(done: int, total: int, hit: bool) -> None:
            bar.update(1)
            bar.set_postfix(cached=hit)

        report = collect_dataset(store, target, args.dataset, prompts, settings, samples, on_progress=step)
    print(f"dataset {args.dataset!r}: {len(report.run_ids)} runs "
          f"({report.generated} generated, {report.cached} from the cache) in {store.url}")
    return 0
