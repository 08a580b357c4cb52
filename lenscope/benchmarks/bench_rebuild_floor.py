"""The full rebuild's floor on this machine: the matrix arithmetic its three largest phases cannot avoid, at the
fastest rate these cores multiply the target's matrices.

Counted from the shipped generations as the study uses them (nothing is trained or generated):
- **import**: every featured token (a censored run's prompt and first answer tokens only, as the study imports them)
  through every weight of the target and its output head, with attention over its prefix;
- **PiA**: the prefill of each distinct prompt inside the PiA question, every layer, the output head at its last
  token only (the answers' decode steps are not counted);
- **drafters**: each variant the study trains, its epochs over the training split's finished runs (fold 0), a
  teacher-forced pass forward and backward (3x the forward's multiply-adds), attention included (the
  training-time test's unrolled steps, the draft head and the length head are not counted).

Each is divided by the target's float32 ``nn.Linear`` rate at 512 rows, the fastest of the shapes
``benchmark roofline`` measures (its :func:`~lenscope.benchmarks.bench_roofline.matmul_gflops`). Every omission
lowers the floor: no implementation on these cores in float32 runs these phases faster. The cross-validation's
trainings are small heads bound by per-step overhead, not arithmetic, and are left out too.

Usage: python -m lenscope benchmark rebuild-floor [--rows 512]. The last line:
``rebuild floor: N min of matrix arithmetic at G GFLOP/s (float32, C cores), against the goal of 60``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from lenscope.benchmarks.bench_roofline import DecoderShape, matmul_gflops
from lenscope.benchmarks.records import Number, Numbers

GOAL_MINUTES = 60


@dataclass(frozen=True)
class Work:
    """One phase's unavoidable arithmetic: what it covers, its tokens and its FLOPs."""

    phase: str
    what: str
    tokens: int
    flops: float


def sequence_flops(shape: DecoderShape, length: int, head_rows: int | None = None) -> float:
    """FLOPs of one teacher-forced pass over ``length`` tokens: every layer's weights per token, attention over
    each token's prefix, and the output head at every token (or at ``head_rows`` of them)."""
    head = 2.0 * shape.hidden * shape.vocab
    per_token = shape.flops_per_token(0) - head
    attention = 4.0 * shape.layers * shape.hidden * length * (length - 1) / 2
    return length * per_token + attention + head * (length if head_rows is None else head_rows)


def import_work(shape: DecoderShape, featured: Sequence[int]) -> Work:
    return Work("import", "every featured token through every weight and the output head", sum(featured),
                sum(sequence_flops(shape, n) for n in featured))


def pia_work(shape: DecoderShape, question_lengths: Sequence[int]) -> Work:
    return Work("baselines: PiA", "prefill of each distinct prompt in the PiA question (decode not counted)",
                sum(question_lengths), sum(sequence_flops(shape, n, head_rows=1) for n in question_lengths))


def drafter_macs(drafter: nn.Module) -> int:
    """Multiply-adds per token of a drafter's trainable linear layers outside its length head."""
    return sum(m.in_features * m.out_features for name, m in drafter.named_modules()
               if isinstance(m, nn.Linear) and not name.startswith("length_head"))


def drafter_work(variant: str, macs: int, attention: bool, hidden: int, train_lengths: Sequence[int],
                 epochs: int) -> Work:
    """A drafter's training: ``epochs`` teacher-forced passes, forward and backward, over ``train_lengths``."""
    forward = sum(2.0 * macs * n + (4.0 * hidden * n * (n - 1) / 2 if attention else 0.0) for n in train_lengths)
    return Work(f"drafter:{variant}", f"{epochs} epochs x {len(train_lengths):,} training runs, forward and backward",
                epochs * sum(train_lengths), 3.0 * epochs * forward)


def study_work(target) -> list[Work]:
    """The import's, PiA's and every study drafter's arithmetic on the shipped study (see the module docstring)."""
    from lenscope.analysis.baselines.pia import PIA_TEMPLATE
    from lenscope.analysis.drafter.training import DRAFT_VOCAB_SIZE, get_variant
    from lenscope.jobs.results.crossval import CENSORED_ANSWER_TOKENS
    from lenscope.jobs.runs.datasets import with_splits
    from lenscope.jobs.runs.generations import read_generations
    from lenscope.jobs.study.pipeline import EPOCHS, PUBLISHED_SIZE, SHIPPED, STUDY_DRAFTERS
    from lenscope.models.drafter import Drafter

    shape = DecoderShape.of(target.config)
    _, records = read_generations(SHIPPED / "study-generations.jsonl.gz")
    featured = [len(r["prompt_ids"]) + (len(r["output_ids"]) if r["finished"]
                                        else min(len(r["output_ids"]), CENSORED_ANSWER_TOKENS)) for r in records]
    prompts = list(dict.fromkeys(r["prompt"] for r in records))
    work = [import_work(shape, featured),
            pia_work(shape, [len(target.chat_ids(PIA_TEMPLATE.format(prompt=p))) for p in prompts])]
    runs = with_splits(pd.DataFrame({"source": [r["source"] for r in records],
                                     "source_ref": [r["ref"] for r in records],
                                     "prompt": [r["prompt"] for r in records],
                                     "finished": [r["finished"] for r in records]}))
    train = [len(r["prompt_ids"]) + len(r["output_ids"]) for r, split, censored
             in zip(records, runs["split"], runs["censored"]) if split == "train" and not censored and r["output_ids"]]
    for variant in STUDY_DRAFTERS[PUBLISHED_SIZE]:
        spec = get_variant(variant)
        drafter = Drafter.for_target(target, **spec.drafter_overrides(), draft_vocab_size=DRAFT_VOCAB_SIZE)
        work.append(drafter_work(variant, drafter_macs(drafter), spec.use_decoder, shape.hidden, train,
                                 EPOCHS[PUBLISHED_SIZE]["drafter"]))
    return work


def report(work: Sequence[Work], gflops: float) -> str:
    """The table of phases and the last line."""
    total = sum(w.flops for w in work) / (gflops * 1e9) / 60
    lines = ["| phase | what is counted | tokens | TFLOP | floor, min |", "|---|---|---|---|---|"]
    for w in work:
        lines.append(f"| {w.phase} | {w.what} | {w.tokens:,} | {w.flops / 1e12:.0f} | "
                     f"{w.flops / (gflops * 1e9) / 60:.1f} |")
    lines.append(f"rebuild floor: {total:.0f} min of matrix arithmetic at {gflops:.0f} GFLOP/s "
                 f"(float32, {torch.get_num_threads()} threads on {os.cpu_count()} cores), "
                 f"against the goal of {GOAL_MINUTES}")
    return "\n".join(lines)


def figures(work: Sequence[Work], gflops: float, rows: int) -> Numbers:
    """Each phase's tokens, TFLOP and floor, the matrix rate and the total floor against the goal."""
    numbers: Numbers = {}
    for w in work:
        key = w.phase.replace("baselines: ", "").replace(":", "_").replace("-", "_").lower()
        numbers |= {f"{key}_tokens": Number(w.tokens, "tokens", f"{w.phase}: {w.what}"),
                    f"{key}_tflop": Number(w.flops / 1e12, "TFLOP", f"{w.phase}: its unavoidable arithmetic"),
                    f"{key}_floor_min": Number(w.flops / (gflops * 1e9) / 60, "min", f"{w.phase}: its floor")}
    total = sum(w.flops for w in work) / (gflops * 1e9) / 60
    return numbers | {
        "gflops": Number(gflops, "GFLOP/s", f"the target's float32 nn.Linear rate at {rows} rows, "
                                            f"{torch.get_num_threads()} threads (fastest of 7)"),
        "floor_min": Number(total, "min", "the rebuild's floor: the phases' arithmetic at that rate"),
        "floor_vs_goal": Number(total / GOAL_MINUTES, "x", f"the floor over the goal of {GOAL_MINUTES} min")}


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512, help="rows of the matrix rate measured (default 512)")
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be at least 1")
    from lenscope.models.target import TargetModel

    target = TargetModel.load(None, device="cpu", dtype="float32")
    work = study_work(target)
    gflops = matmul_gflops(DecoderShape.of(target.config), args.rows, torch.float32)
    print(report(work, gflops))
    return figures(work, gflops, args.rows)


if __name__ == "__main__":
    main()
