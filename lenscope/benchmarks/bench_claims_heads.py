"""The claims' small heads trained side by side against one at a time, measured in one run.

The cross-validation trains each EGTP static head 15 times (5 folds x 3 seeds) and PLP 15 times. This times one
learner's 15 trainings both ways, as the claims group them (an EGTP head's 15 side by side; PLP's 3 seeds of a fold
side by side), at the full study's shapes (an EGTP head: about 1,400 training and 250 validation runs of 576 pooled
features, batch 16; PLP: rows of 1,153 features, batch 64, fewer rows than the study's 125,000 a fold unless
``--plp-rows`` says so) on random features with a length signal, and checks that every head comes out bit for bit
the same. Usage: ``python -m lenscope benchmark claims-heads [--epochs 10] [--plp-rows 20000]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch

from lenscope.analysis.egtp.training import HeadConfig, HeadTask, TrainResult, train_heads
from lenscope.benchmarks.records import Number, Numbers

FOLDS, SEEDS = 5, 3


def _tasks(rows: int, val_rows: int, features: int, config: HeadConfig) -> list[HeadTask]:
    """Five folds' data (sizes a few rows apart, as the study's folds are), three seeds each."""
    tasks = []
    for fold in range(FOLDS):
        g = torch.Generator().manual_seed(fold)
        n = rows + 7 * fold
        x, x_val = torch.randn(n, features, generator=g), torch.randn(val_rows, features, generator=g)
        y, y_val = (t[:, 0].abs() * 150 + 10 + torch.rand(len(t), generator=g) * 100 for t in (x, x_val))
        tasks += [HeadTask(x, y, x_val, y_val, replace(config, seed=seed)) for seed in range(SEEDS)]
    return tasks


def _same(a: list[TrainResult], b: list[TrainResult]) -> bool:
    return all(x.best_epoch == y.best_epoch and all(torch.equal(p, q) for p, q in
                                                    zip(x.head.state_dict().values(), y.head.state_dict().values()))
               for x, y in zip(a, b))


def compare(tasks: list[HeadTask], side_by_side: int) -> tuple[float, float, bool]:
    """Seconds for the tasks one at a time and ``side_by_side`` at a time, and whether the heads are bit for bit the
    same."""
    began = time.perf_counter()
    alone = [train_heads([task])[0] for task in tasks]
    one_at_a_time = time.perf_counter() - began
    began = time.perf_counter()
    together = [r for i in range(0, len(tasks), side_by_side) for r in train_heads(tasks[i:i + side_by_side])]
    return one_at_a_time, time.perf_counter() - began, _same(alone, together)


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the EGTP head (the claims train 60)")
    parser.add_argument("--plp-rows", type=int, default=20_000, help="PLP training rows a fold (0: no PLP row)")
    parser.add_argument("--plp-epochs", type=int, default=1, help="epochs of PLP (the claims train 15)")
    args = parser.parse_args(argv)
    runs = [("EGTP head", _tasks(1_400, 250, 576, HeadConfig(epochs=args.epochs)), args.epochs, FOLDS * SEEDS)]
    if args.plp_rows:
        runs.append(("PLP", _tasks(args.plp_rows, 2_000, 1_153, HeadConfig(epochs=args.plp_epochs, batch_size=64)),
                     args.plp_epochs, SEEDS))
    print(f"| learner (15 trainings: {FOLDS} folds x {SEEDS} seeds) | epochs | one at a time, s | side by side, s "
          f"| ratio | bit for bit |", flush=True)
    print("|---|---|---|---|---|---|")
    last, numbers = "", {}
    for name, tasks, epochs, side_by_side in runs:
        alone, together, same = compare(tasks, side_by_side)
        key, of = ("egtp" if name == "EGTP head" else "plp"), (f"{name}'s {len(tasks)} trainings ({epochs} epochs, "
                                                               f"{len(tasks[0].x_train):,} rows)")
        numbers |= {f"{key}_one_at_a_time_s": Number(alone, "s", f"{of}, one at a time"),
                    f"{key}_side_by_side_s": Number(together, "s", f"{of}, {side_by_side} side by side"),
                    f"{key}_ratio": Number(alone / together, "x", f"{of}: one at a time over side by side"),
                    f"{key}_bit_for_bit": Number(same, "", f"{of}: every head the same both ways")}
        print(f"| {name} ({len(tasks[0].x_train):,} rows, {side_by_side} side by side) | {epochs} | {alone:.1f} | "
              f"{together:.1f} | {alone / together:.2f}x | {'yes' if same else 'NO'} |", flush=True)
        if name == "EGTP head":
            last = (f"claims heads: {len(tasks)} EGTP heads side by side in {together:.1f} s against {alone:.1f} s one "
                    f"at a time ({alone / together:.2f}x), {'bit for bit the same' if same else 'NOT the same'}")
    print(last)
    return numbers
