"""Wall-clock cost of the OUTLETS length head, a drafter step and a target decode step, and live speculative vs
plain decoding on the same prompts.

Usage: ``python -m lenscope benchmark drafter [--drafter DIR | --dataset NAME] [--context 256] [--repeats 50]
[--prompts 4] [--max-new-tokens 48] [--draft-steps 5] [--device cpu]``. Each per-token cost is the median over
``repeats`` single-token steps with a KV cache of ``context`` tokens (on the CPU with one thread by default).
Speculative and plain greedy decoding then generate the same answers (checked) for the same prompts: the
dataset's held-out prompts with its registered OUTLETS drafter (``--dataset``), else a few fixed prompts.
Prints JSON, then the last line ``speculative speedup vs plain decoding: N.NNx; length head / drafter step:
N.NNNNx``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch

from lenscope.analysis.drafter.acceptance import cycle_acceptance
from lenscope.benchmarks.records import Number, Numbers
from lenscope.benchmarks.timing import median_seconds
from lenscope.models.drafter import Drafter
from lenscope.models.drafter_decoding import SpeculativeDecoder, plain_decode
from lenscope.models.target import TargetModel

PROMPTS = ("Explain what a hash table is.", "Write a short poem about the sea.",
           "Give three tips for learning a language.", "What causes the seasons on Earth?")


def median_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median wall time of ``fn`` in milliseconds (after two warm-up calls), waiting for ``device`` to finish
    its work (a GPU runs asynchronously)."""
    def run() -> None:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return median_seconds(run, repeats, warmup=2) * 1000


@torch.no_grad()
def measure(target: TargetModel, drafter: Drafter, context: int, repeats: int) -> dict:
    """Per-token costs (ms) of the length head, a drafter step (decoder layer + draft-token head over the draft
    vocabulary) and a target decode step (all layers + LM head), all on the target's device."""
    device = target.device
    drafter = drafter.to(device)
    ids = torch.randint(0, target.tokenizer.vocab_size, (context,), device=device)
    cache = target.model(input_ids=ids.unsqueeze(0), use_cache=True).cache
    token = ids[-1:].unsqueeze(0)

    def target_step() -> None:
        target.model(input_ids=token, cache=cache, use_cache=True)

    d = drafter.config.hidden_size
    hidden = [torch.randn(1, context, d, device=device) for _ in drafter.config.fuse_layers]
    rep, kv = drafter(hidden, ids.unsqueeze(0))
    last = rep[:, -1:]
    positions = torch.tensor([[context]], device=device)

    def drafter_step() -> None:
        mask = None if kv is None else torch.ones(1, 1, kv[0].shape[2] + 1, dtype=torch.bool, device=device)
        rep_next, _ = drafter.step(last, token, positions, kv, mask)
        drafter.target_ids(drafter.draft_logits(rep_next).argmax(-1))

    costs = {"length_head_ms": median_ms(lambda: drafter.predict_log_length(last), repeats, device),
             "drafter_step_ms": median_ms(drafter_step, repeats, device),
             "target_step_ms": median_ms(target_step, repeats, device)}
    costs["head_over_drafter"] = costs["length_head_ms"] / costs["drafter_step_ms"]
    costs["head_over_target"] = costs["length_head_ms"] / costs["target_step_ms"]
    costs["drafter_over_target"] = costs["drafter_step_ms"] / costs["target_step_ms"]
    return costs


def decode_speeds(target: TargetModel, drafter: Drafter, prompts: list[list[int]], max_new_tokens: int,
                  k: int) -> dict:
    """Greedy plain and speculative decoding of each prompt, interleaved; tokens/s of both, the speedup (total
    plain time / total speculative time: the answers are identical), tau and the acceptance per position."""
    decoder = SpeculativeDecoder(target, drafter, k)
    decoder.generate(prompts[0], 4)
    plain_decode(target, prompts[0], 4)
    plain_s = spec_s = 0.0
    tokens = identical = 0
    accepted: list[int] = []
    for ids in prompts:
        plain, spec = plain_decode(target, ids, max_new_tokens), decoder.generate(ids, max_new_tokens)
        plain_s, spec_s, tokens = plain_s + plain.seconds, spec_s + spec.seconds, tokens + len(plain.tokens)
        identical += spec.tokens == plain.tokens
        accepted += [c.accepted for c in spec.cycles]
    return {"prompts": len(prompts), "tokens": tokens, "identical": identical,
            "plain_tokens_per_s": tokens / plain_s, "speculative_tokens_per_s": tokens / spec_s,
            "speedup": plain_s / spec_s, "tau": 1 + sum(accepted) / max(len(accepted), 1),
            "acceptance": [a / e if e else None for e, a in zip(*(t.tolist() for t in cycle_acceptance(accepted, k)))]}


def load_inputs(args: argparse.Namespace, target: TargetModel) -> tuple[Drafter, list[list[int]], str]:
    """The drafter and prompts to time: a dataset's OUTLETS drafter and held-out prompts, a saved drafter dir
    with the fixed prompts, or a fresh (untrained: nothing accepted) drafter."""
    prompts = [target.chat_ids(p) for p in PROMPTS[:args.prompts]]
    if args.dataset:
        from lenscope.jobs.drafter.live import held_out_prompts, registered_drafters
        from lenscope.store.store import Store

        store = Store()
        row = registered_drafters(store, args.dataset)["outlets"]
        held_out = [ids for _, ids in held_out_prompts(store, args.dataset, args.prompts)]
        return Drafter.load_for_target(row["artifact_path"], target), held_out or prompts, str(row.name)
    if args.drafter:
        return Drafter.load_for_target(args.drafter, target), prompts, args.drafter
    return Drafter.for_target(target, draft_vocab_size=4096).eval(), prompts, "fresh (untrained)"


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="target model spec (default: embedded SmolLM2)")
    parser.add_argument("--drafter", default="", help="saved drafter dir")
    parser.add_argument("--dataset", default="", help="use this dataset's OUTLETS drafter and held-out prompts")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu (with --threads threads), cuda, cuda:1, ...")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--draft-steps", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = TargetModel.load(args.model, device=args.device)
    drafter, prompts, source = load_inputs(args, target)
    result = {"context": args.context, "device": target.device.type, "threads": args.threads, "drafter": source,
              "draft_vocab_size": drafter.config.draft_vocab_size or drafter.config.vocab_size,
              **measure(target, drafter, args.context, args.repeats),
              **decode_speeds(target, drafter, prompts, args.max_new_tokens, args.draft_steps)}
    print(json.dumps(result, indent=2))
    print(f"speculative speedup vs plain decoding: {result['speedup']:.2f}x; "
          f"length head / drafter step: {result['head_over_drafter']:.4f}x")
    return figures(result)


def figures(result: dict) -> Numbers:
    """The figures of a :func:`main` result (the drafter's name and the acceptance per position stay in its JSON)."""
    ctx = f"{result['context']}-token KV cache, {result['threads']} thread(s) on {result['device']}, drafter " \
          f"{result['drafter']}"
    costs = {"length_head_ms": "the length head", "drafter_step_ms": "a drafter step (decoder layer + draft head)",
             "target_step_ms": "a target decode step"}
    ratios = {"head_over_drafter": "length head over a drafter step",
              "head_over_target": "length head over a target decode step",
              "drafter_over_target": "drafter step over a target decode step"}
    decode = f"greedy decoding of {result['prompts']} prompts ({result['tokens']} tokens)"
    return ({k: Number(result[k], "ms", f"median cost of {what} ({ctx})") for k, what in costs.items()}
            | {k: Number(result[k], "x", what) for k, what in ratios.items()}
            | {"plain_tokens_per_s": Number(result["plain_tokens_per_s"], "tokens/s", f"plain {decode}"),
               "speculative_tokens_per_s": Number(result["speculative_tokens_per_s"], "tokens/s",
                                                  f"speculative {decode}"),
               "speedup": Number(result["speedup"], "x", "speculative over plain decoding (same answers)"),
               "tau": Number(result["tau"], "tokens", "tokens a target step yields speculatively (1 + accepted)"),
               "identical": Number(result["identical"], "prompts", "answers identical to plain decoding")})


if __name__ == "__main__":
    main()
