"""``lenscope train-drafter`` (OUTLETS drafter variants), ``lenscope train-probe`` (TRAIL-style MLP probe on one
target layer), both trained on a collected dataset and registered in the store, ``lenscope drafter-ablation``
(the variants paired with probes that see what the drafter sees) and ``lenscope speculative`` (live speculative
decoding of held-out prompts with the registered drafters)."""

from __future__ import annotations

import argparse

from lenscope.analysis.drafter.acceptance import DRAFT_STEPS
from lenscope.analysis.drafter.training import DRAFT_VOCAB_SIZE, VARIANTS
from lenscope.cli import _common
from lenscope.models.drafter import LENGTH_MODES
from lenscope.models.engine import GENERATION_RANGES


def register(subparsers) -> None:
    p = subparsers.add_parser("train-drafter", help="train an EAGLE-3-style drafter with a length head (OUTLETS)")
    _common.add_model_args(p)
    _common.add_dataset_arg(p, "collected dataset to train on")
    p.add_argument("--variant", default="outlets", choices=list(VARIANTS),
                   help="outlets (joint), lp-only, sd-only, no-decoder, classification, no-gate")
    p.add_argument("--epochs", type=_common.positive_int, default=6, help="training epochs over the train split")
    p.add_argument("--lr", type=_common.positive, default=1e-3, help="AdamW learning rate (the length head uses 3x)")
    p.add_argument("--max-step", type=_common.non_negative_int, default=128,
                   help="store predictions for steps 0..max-step")
    p.add_argument("--seed", type=_common.seed, default=0, help="seed of initialisation and batch order")
    p.add_argument("--ttt-steps", type=_common.positive_int, default=None,
                   help="drafting steps unrolled in training (EAGLE-3 training-time test; default 7 on CUDA, 3 on "
                        "a CPU; 1 = teacher forcing only)")
    p.add_argument("--draft-vocab", type=_common.non_negative_int, default=DRAFT_VOCAB_SIZE,
                   help="draft vocabulary: the most frequent target tokens of the training split (0 = all)")
    _common.add_censoring_arg(p)
    p.set_defaults(func=run_drafter, writes_store=True)

    q = subparsers.add_parser("train-probe", help="train an MLP probe on one target layer (TRAIL-style baseline)")
    _common.add_dataset_arg(q)
    q.add_argument("--layer", type=_common.non_negative_int, default=15, help="stored hidden layer to probe")
    q.add_argument("--mode", default="regression", choices=LENGTH_MODES,
                   help="regression of log1p(length), or binned expected-value classification")
    q.add_argument("--epochs", type=_common.positive_int, default=30,
                   help="most training epochs (the best on validation is kept)")
    q.add_argument("--max-step", type=_common.non_negative_int, default=128,
                   help="store predictions for steps 0..max-step")
    q.add_argument("--seed", type=_common.seed, default=0, help="seed of initialisation and batch order")
    _common.add_censoring_arg(q)
    q.set_defaults(func=run_probe, writes_store=True)

    a = subparsers.add_parser("drafter-ablation", help="the drafter variants (OUTLETS, no-decoder, LP-only) paired "
                                                       "with probes that see what the drafter sees")
    _common.add_dataset_arg(a, "dataset whose registered drafters to compare")
    a.add_argument("--layer", type=_common.non_negative_int, default=30,
                   help="the last layer (pooled probe; a best-layer candidate)")
    a.add_argument("--epochs", type=_common.positive_int, default=20,
                   help="most probe epochs (the best on validation is kept)")
    _common.add_censoring_arg(a)
    a.set_defaults(func=run_drafter_ablation)

    r = subparsers.add_parser("speculative", help="live speculative decoding of held-out prompts: acceptance per "
                                                  "position, tau, speedup (OUTLETS vs SD-only drafter)")
    _common.add_model_args(r)
    _common.add_dataset_arg(r, "dataset whose drafters and test-split prompts to use")
    r.add_argument("--prompts", type=_common.positive_int, default=16, help="held-out prompts to decode")
    r.add_argument("--max-new-tokens", type=_common.number(GENERATION_RANGES["max_new_tokens"]), default=64,
                   help="token cap of each decoded answer")
    r.add_argument("--draft-steps", type=_common.positive_int, default=DRAFT_STEPS, help="drafting horizon k")
    r.add_argument("--temperature", type=_common.number(GENERATION_RANGES["temperature"]), default=0.0,
                   help="0 = greedy (output identical to plain decoding)")
    r.add_argument("--seed", type=_common.number(GENERATION_RANGES["seed"]), default=0,
                   help="seed of sampling (with --temperature above 0)")
    r.set_defaults(func=run_speculative)


def _positive(value: int, name: str) -> None:
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def _report(result) -> None:
    print(f"registered {result.name} (predictor {result.predictor_id}): {_common.metrics_line(result.metrics)}")


def run_drafter(args: argparse.Namespace) -> int:
    from lenscope.jobs.drafter.training import train_drafter_job
    from lenscope.jobs.runs.datasets import dataset_runs
    from lenscope.store.store import Store

    _positive(args.epochs, "--epochs")
    store = Store()
    dataset_runs(store, args.dataset)
    target = _common.load_target(args)
    with _common.PhaseBars(prefix=f"train-drafter {args.variant}") as bars:
        result = train_drafter_job(store, target, args.dataset, args.variant, args.epochs, args.lr,
                                   args.max_step, args.seed, include_censored=args.include_censored,
                                   ttt_steps=args.ttt_steps, draft_vocab_size=args.draft_vocab, on_progress=bars)
    _report(result)
    return 0


def run_probe(args: argparse.Namespace) -> int:
    from lenscope.jobs.drafter.training import train_probe_job
    from lenscope.store.store import Store

    _positive(args.epochs, "--epochs")
    with _common.PhaseBars(prefix=f"train-probe L{args.layer}") as bars:
        result = train_probe_job(Store(), args.dataset, args.layer, args.mode, args.epochs, args.max_step,
                                 args.seed, include_censored=args.include_censored, on_progress=bars)
    _report(result)
    return 0


def run_drafter_ablation(args: argparse.Namespace) -> int:
    from lenscope.figures.drafter import drafter_ablation_tables
    from lenscope.jobs.drafter.ablation import drafter_ablation
    from lenscope.store.store import Store

    _positive(args.epochs, "--epochs")
    with _common.PhaseBars(prefix="drafter-ablation") as bars:
        payload = drafter_ablation(Store(), args.dataset, args.layer, args.epochs, args.include_censored,
                                   on_progress=bars)
    maes, pairs = drafter_ablation_tables(payload)
    candidates = ", ".join(f"L{layer} {mae:.1f}" for layer, mae in payload["candidates"].items() if mae is not None)
    print(f"test split, steps 0-32, one training seed each; best single layer on validation: L{payload['best_layer']} "
          f"(validation MAE {candidates})")
    print(maes.to_string(index=False))
    print(pairs.to_string(index=False))
    return 0


def run_speculative(args: argparse.Namespace) -> int:
    from lenscope.analysis.core.metrics import estimate_text
    from lenscope.jobs.drafter.live import speculative_job
    from lenscope.store.store import Store

    store = Store()
    target = _common.load_target(args)
    with _common.PhaseBars(prefix="speculative") as bars:
        result = speculative_job(store, target, args.dataset, args.prompts, args.max_new_tokens, args.draft_steps,
                                 args.temperature, args.seed, on_progress=bars)

    def text(est: dict, digits: int = 2) -> str:
        return estimate_text(est, digits=digits, missing="n/a")

    print(f"{result['prompts']} held-out prompts, k={result['k']}, T={result['temperature']}: plain decoding "
          f"{text(result['plain_tokens_per_s'], 1)} tokens/s")
    for variant, d in result["drafters"].items():
        rates = ", ".join(text(e) for e in d["acceptance"])
        print(f"{variant}: acceptance per position {rates}; tau {text(d['tau'])}; "
              f"{text(d['tokens_per_s'], 1)} tokens/s; speedup {text(d['speedup'])}x; "
              f"identical to plain decoding on {d['identical_to_plain']}/{d['prompts']} prompts")
    if result["difference"]:
        diff = result["difference"]
        rates = ", ".join(text(e) for e in diff["acceptance"])
        print(f"{diff['pair'][0]} - {diff['pair'][1]}: acceptance {rates}; tau {text(diff['tau'])}")
    return 0
