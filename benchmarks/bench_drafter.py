"""Wall-clock cost of the OUTLETS length head vs one drafter step vs one target decode step.

Usage: ``python -m lenscope benchmark drafter [--drafter DIR] [--context 256] [--repeats 50]``.
Each cost is the median over ``repeats`` single-token steps with a KV cache of ``context`` tokens
(one process, one thread by default); prints the times and their ratios as JSON.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch

from benchmarks.timing import median_seconds
from models.drafter import Drafter
from models.target import TargetModel


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn`` in milliseconds (after two warm-up calls)."""
    return median_seconds(fn, repeats, warmup=2) * 1000


@torch.no_grad()
def measure(target: TargetModel, drafter: Drafter, context: int, repeats: int) -> dict:
    """Per-token costs (ms) of the length head, a drafter step (decoder layer + draft-token head) and a
    target decode step (all layers + LM head)."""
    ids = torch.randint(0, target.tokenizer.vocab_size, (context,))
    cache = target.model(input_ids=ids.unsqueeze(0).to(target.device), use_cache=True).cache
    token = ids[-1:].unsqueeze(0).to(target.device)

    def target_step() -> None:
        target.model(input_ids=token, cache=cache, use_cache=True)

    d = drafter.config.hidden_size
    hidden = [torch.randn(1, context, d) for _ in drafter.config.fuse_layers]
    rep, kv = drafter(hidden, ids.unsqueeze(0))
    last = rep[:, -1:]
    positions = torch.tensor([[context]])

    def drafter_step() -> None:
        mask = None if kv is None else torch.ones(1, 1, kv[0].shape[2] + 1, dtype=torch.bool)
        rep_next, _ = drafter.step(last, ids[-1:].unsqueeze(0), positions, kv, mask)
        drafter.draft_logits(rep_next).argmax(-1)

    costs = {"length_head_ms": median_ms(lambda: drafter.predict_log_length(last), repeats),
             "drafter_step_ms": median_ms(drafter_step, repeats),
             "target_step_ms": median_ms(target_step, repeats)}
    costs["head_over_drafter"] = costs["length_head_ms"] / costs["drafter_step_ms"]
    costs["head_over_target"] = costs["length_head_ms"] / costs["target_step_ms"]
    costs["drafter_over_target"] = costs["drafter_step_ms"] / costs["target_step_ms"]
    return costs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="target model spec (default: embedded SmolLM2)")
    parser.add_argument("--drafter", default="", help="saved drafter dir (default: a fresh one; cost is the same)")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = TargetModel.load(args.model, device="cpu")
    drafter = Drafter.load_for_target(args.drafter, target) if args.drafter else Drafter.for_target(target).eval()
    result = {"context": args.context, "threads": args.threads,
              **measure(target, drafter, args.context, args.repeats)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
