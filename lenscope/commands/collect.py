"""``lenscope collect``: build a dataset of generations with true lengths."""

from __future__ import annotations

import argparse

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
    p.add_argument("--sources", type=_parse_sources, default={"sharegpt": 3, "humaneval": 1},
                   help="prompt sources and weights, e.g. sharegpt=3,humaneval=1")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples-per-prompt", type=int, default=1,
                   help="answers per prompt (RL-style sampling uses 4 at temperature 1.0)")
    p.add_argument("--max-prompt-chars", type=int, default=2000)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analysis.prompts import sample_prompts
    from cache.store import Store
    from lenscope.collect import collect_dataset
    from models.target import GenerationSettings

    prompts = sample_prompts(args.n, args.sources, seed=args.seed, max_chars=args.max_prompt_chars)
    target = load_target(args)
    store = Store()
    settings = GenerationSettings(args.max_new_tokens, args.temperature, args.top_p, args.seed)
    with progress_bar(len(prompts) * args.samples_per_prompt, f"collect {args.dataset}") as bar:
        def step(done: int, total: int, hit: bool) -> None:
            bar.update(1)
            bar.set_postfix(cached=hit)

        report = collect_dataset(store, target, args.dataset, prompts, settings,
                                 args.samples_per_prompt, on_progress=step)
    print(f"dataset {args.dataset!r}: {len(report.run_ids)} runs "
          f"({report.generated} generated, {report.cached} from the cache) in {store.url}")
    return 0
