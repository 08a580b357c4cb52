"""Collection speed, measured side by side in one run on the same ShareGPT prompts and sampling settings.

Tokens/s counts answer tokens up to and including the stop token; rows that keep computing after they
finished (HF ``generate`` pads finished rows until the whole batch is done) count as waste.
- (a) the old per-token recording loop at batch 1 (lenscope's first collector, kept here as the baseline);
- (b) the batched engine at each batch size, features from the decode, and at the best size with
  features from a teacher-forced pass afterwards (not in ``--quick``);
- (c) HF ``generate`` without any features at the same batch sizes (prompts sorted by length): the
  sampling ceiling;
- (d) one teacher-forced batched forward over the engine's prompt + answer tokens: the compute ceiling.
Batch-1 methods run on the first ``--single`` prompts (tokens/s is a rate).

Usage: python -m lenscope benchmark collect [--quick] [--prompts 128] [--new-tokens 256] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import time

import torch

from lenscope.analysis.data.prompts import sample_prompts
from lenscope.benchmarks.records import Number, Numbers
from lenscope.models.engine import BatchedEngine, Generation, GenerationSettings
from lenscope.models.logits import summarize_logits
from lenscope.models.target import (
    DTYPES,
    FORWARD_TOKENS,
    TOP_K,
    TargetModel,
    group_by_length,
    left_pad,
    positions_from_mask,
)


@torch.no_grad()
def per_token_loop(target: TargetModel, prompt_ids: list[int], settings: GenerationSettings,
                   layers: list[int]) -> int:
    """lenscope's original collector: one forward per token through the full model, full-vocabulary
    logits and the recorded layers copied to the CPU each step, features summarised at the end.
    Returns the number of answer tokens."""
    gen = torch.Generator().manual_seed(settings.seed)
    chunk, past, logits_rows, hidden_rows, output_ids = torch.tensor(prompt_ids), None, [], [], []
    done = False
    while True:
        out = target.model(input_ids=chunk.unsqueeze(0), cache=past, use_cache=True, output_hidden_states=True)
        past = out.cache
        logits_rows.append(out.logits[0].float().cpu())
        hidden_rows.append({layer: out.hidden_states[layer][0].float().cpu() for layer in layers})
        if done or len(output_ids) == settings.max_new_tokens:
            break
        probs = torch.softmax(logits_rows[-1][-1] / settings.temperature, dim=-1)
        next_id = int(torch.multinomial(probs, 1, generator=gen))
        output_ids.append(next_id)
        done = next_id in target.stop_ids
        chunk = torch.tensor([next_id])
    summarize_logits(torch.cat(logits_rows), TOP_K)  # the old loop's feature work, kept in the timing
    for layer in layers:
        torch.cat([h[layer] for h in hidden_rows])
    return len(output_ids)


def useful_length(row: list[int], stops: set[int]) -> int:
    """Answer tokens up to and including the first stop token."""
    return next((i + 1 for i, token in enumerate(row) if token in stops), len(row))


@torch.no_grad()
def hf_generate(target: TargetModel, prompts: list[list[int]], settings: GenerationSettings,
                batch: int) -> tuple[int, int]:
    """HF ``generate`` with sampling and no features, prompts sorted by length, left padding.
    Returns (useful answer tokens, wasted row-steps after a row finished)."""
    torch.manual_seed(settings.seed)
    ordered = sorted(prompts, key=len)
    useful = waste = 0
    for start in range(0, len(ordered), batch):
        ids, mask = (t.to(target.device) for t in left_pad(ordered[start:start + batch]))
        width = ids.shape[1]
        out = target.model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                    temperature=settings.temperature, top_p=settings.top_p, top_k=0,
                                    max_new_tokens=settings.max_new_tokens, eos_token_id=sorted(target.stop_ids),
                                    pad_token_id=0)
        steps = out.shape[1] - width
        for row in out[:, width:].tolist():
            n = useful_length(row, target.stop_ids)
            useful, waste = useful + n, waste + steps - n
    return useful, waste


@torch.no_grad()
def teacher_forward(target: TargetModel, sequences: list[list[int]]) -> None:
    """A plain batched forward (logits, no features) over whole sequences, grouped by length."""
    for group in group_by_length([len(s) for s in sequences], FORWARD_TOKENS):
        ids, mask = left_pad([sequences[i] for i in group])
        target.model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask))


def sampling(new_tokens: int, n_prompts: int) -> tuple[GenerationSettings, list[GenerationSettings]]:
    """The sampling of every method (T = 0.7, top-p 1): HF ``generate``'s settings (seed 0) and the engine's per
    row (seed = row)."""
    return (GenerationSettings(max_new_tokens=new_tokens, temperature=0.7, top_p=1.0, seed=0),
            [GenerationSettings(new_tokens, 0.7, 1.0, seed=i) for i in range(n_prompts)])


def engine_run(target: TargetModel, layers: list[int], batch: int, features: str, prompts: list[list[int]],
               per_row: list[GenerationSettings]) -> dict[int, Generation]:
    """The batched engine's answers to ``prompts`` (row ``i`` sampled with ``per_row[i]``) at ``batch`` rows, features
    from the ``decode`` or a ``teacher``-forced pass afterwards: {prompt index: generation}."""
    engine = BatchedEngine(target, layers, batch_size=batch, features=features)
    return dict(engine.run(prompts, per_row[:len(prompts)]))


KEYS = {"(a) per-token loop": "loop", "(b) engine, features from decode": "engine_decode",
        "(b) engine, teacher-forced features": "engine_teacher", "(c) HF generate, no features": "hf_generate",
        "(d) teacher-forced forward": "teacher_forward"}  # figure names of the methods


def timed(fn) -> tuple[object, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 prompts, 32 new tokens, batch-1 methods on 8")
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--single", type=int, default=16, help="prompts for the batch-1 methods")
    parser.add_argument("--batch-sizes", default="1,8,32,64")
    parser.add_argument("--max-prompt-chars", type=int, default=1000)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                        help="weights and activations of every method (bfloat16 uses the CPU's bf16 units)")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.new_tokens, args.single = 64, 32, 8
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    target = TargetModel.load(dtype=args.dtype)
    layers = target.default_layers()
    items = sample_prompts(args.prompts, {"sharegpt": 1}, seed=0, max_chars=args.max_prompt_chars)
    prompts = [target.chat_ids(item.text) for item in items]
    settings, per_row = sampling(args.new_tokens, len(prompts))
    single = prompts[:args.single]
    print(f"model {target.source.spec} on {target.device.type} ({target.dtype}), {torch.get_num_threads()} "
          f"threads; {len(prompts)} ShareGPT prompts (<= {args.max_prompt_chars} chars, "
          f"{sum(map(len, prompts)) / len(prompts):.0f} tokens on average), {args.new_tokens} new tokens, "
          f"T=0.7; batch-1 methods on the first {len(single)}", flush=True)
    rows: list[tuple[str, int, int, int, int, float]] = []
    numbers: Numbers = {}

    def report(method: str, batch: int, n_prompts: int, tokens: int, waste: int, seconds: float) -> float:
        rows.append((method, batch, n_prompts, tokens, waste, seconds))
        numbers[f"{KEYS[method]}{f'_batch_{batch}' if batch else ''}_tokens_per_s"] = Number(
            tokens / seconds, "tokens/s", f"{method}, {f'batch {batch}' if batch else 'grouped by length'}: "
                                          f"{tokens:,} answer tokens of {n_prompts} prompts in {seconds:.1f} s")
        print(f"  {method:<34} batch {batch:>3}: {tokens:>6} tokens in {seconds:7.1f} s = "
              f"{tokens / seconds:7.1f} tokens/s (waste {waste} row-steps)", flush=True)
        return tokens / seconds

    tokens, seconds = timed(lambda: sum(per_token_loop(target, p, s, layers) for p, s in zip(single, per_row)))
    loop_rate = report("(a) per-token loop", 1, len(single), tokens, 0, seconds)

    engine_rates, outputs = {}, {}
    for batch in sizes:
        subset = single if batch == 1 else prompts
        result, seconds = timed(
            lambda batch=batch, subset=subset: engine_run(target, layers, batch, "decode", subset, per_row))
        tokens = sum(g.output_length for g in result.values())
        engine_rates[batch] = report("(b) engine, features from decode", batch, len(subset), tokens, 0, seconds)
        if batch != 1:
            outputs = result
    best = max((b for b in sizes if b != 1), key=engine_rates.get, default=1)
    teacher_rate = 0.0
    if not args.quick:  # the design choice between the two feature paths, measured once at full size
        result, seconds = timed(
            lambda: engine_run(target, layers, best, "teacher", prompts if best != 1 else single, per_row))
        teacher_rate = report("(b) engine, teacher-forced features", best, len(result),
                              sum(g.output_length for g in result.values()), 0, seconds)
    hf_rates = {}
    for batch in sizes:
        subset = single if batch == 1 else prompts
        with torch.no_grad():
            (tokens, waste), seconds = timed(
                lambda batch=batch, subset=subset: hf_generate(target, subset, settings, batch))
        hf_rates[batch] = report("(c) HF generate, no features", batch, len(subset), tokens, waste, seconds)
    sequences = [prompts[i] + g.output_ids for i, g in outputs.items()]
    with torch.no_grad():
        _, seconds = timed(lambda: teacher_forward(target, sequences))
    report("(d) teacher-forced forward", 0, len(sequences), sum(g.output_length for g in outputs.values()), 0,
           seconds)

    print("\n| method | batch | prompts | answer tokens | wasted row-steps | seconds | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for method, batch, n_prompts, tokens, waste, seconds in rows:
        print(f"| {method} | {batch or 'by length'} | {n_prompts} | {tokens} | {waste} | {seconds:.1f} | "
              f"{tokens / seconds:.1f} |")
    if teacher_rate:
        faster = "decode" if engine_rates[best] >= teacher_rate else "teacher-forced pass"
        print(f"\nfeatures: from the {faster} is faster at batch {best} "
              f"({engine_rates[best]:.1f} vs {teacher_rate:.1f} tokens/s)")
    engine_best = max(engine_rates[best], teacher_rate)
    print(f"collect engine speedup vs per-token loop: {engine_best / loop_rate:.2f}x; "
          f"vs HF generate: {engine_best / max(hf_rates.values()):.2f}x")
    ceiling = numbers["teacher_forward_tokens_per_s"].value
    return numbers | {
        "speedup_vs_loop": Number(engine_best / loop_rate, "x", "the engine's best tokens/s over the per-token loop's"),
        "speedup_vs_hf_generate": Number(engine_best / max(hf_rates.values()), "x",
                                         "the engine's best tokens/s over HF generate's best"),
        "ceiling_vs_loop": Number(ceiling / loop_rate, "x", "the teacher-forced forward (compute ceiling) over the "
                                                            "per-token loop")}


if __name__ == "__main__":
    main()
