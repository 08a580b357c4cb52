"""Collection in one process vs on a local Ray cluster, side by side on the same prompts and settings.

Both sides sample the same requests (ShareGPT prompts, T = 0.7, fixed seeds) with the batched engine into fresh
stores: (a) this process with all cores; (b) ``--workers`` Ray actors on a local cluster, each with
cores / workers threads, the driver writing their runs. The answers are compared token by token. On a machine
with few cores Ray's cost (cluster start, one model load per worker, moving runs to the driver) is the
figure: the ratio says how much of (a) it keeps. The projection per added GPU assumes workers scale as on a
cluster of identical GPUs (one worker each, no shared cores): each adds one GPU's engine throughput times the
share of compute that (b) kept of (a) here.

Usage: python -m lenscope benchmark ray [--prompts 32] [--new-tokens 64] [--workers 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from lenscope.analysis.data.prompts import sample_prompts
from lenscope.benchmarks.records import Number, Numbers
from lenscope.jobs.runs.collect import CollectReport, collect_dataset
from lenscope.jobs.runs.ray_cluster import RayOptions, connect
from lenscope.models.engine import GenerationSettings
from lenscope.models.target import TargetModel
from lenscope.store.settings import sqlite_url
from lenscope.store.store import Store


def timed_collect(target: TargetModel, prompts, settings: GenerationSettings, ray: RayOptions | None,
                  root: Path) -> tuple[CollectReport, float, Store]:
    """A collection into a fresh store under ``root``; returns its report, wall seconds and the store."""
    store = Store(url=sqlite_url(root / "db.sqlite"), tensor_dir=root / "tensors")
    start = time.perf_counter()
    report = collect_dataset(store, target, "bench", prompts, settings, ray=ray)
    return report, time.perf_counter() - start, store


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    prompts = sample_prompts(args.prompts, {"sharegpt": 1.0}, seed=0)
    settings = GenerationSettings(max_new_tokens=args.new_tokens, temperature=0.7, seed=0)
    target = TargetModel.load()
    cores = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for side in ("warm-up", "a", "b"):
            (root / side).mkdir()
        timed_collect(target, prompts[:2], GenerationSettings(max_new_tokens=4), None, root / "warm-up")
        single, single_s, store_a = timed_collect(target, prompts, settings, None, root / "a")
        start = time.perf_counter()
        options = RayOptions(workers=args.workers, shard_size=max(1, args.prompts // (2 * args.workers)),
                             num_cpus=cores)
        connect(options)
        startup_s = time.perf_counter() - start
        ray_report, ray_s, store_b = timed_collect(target, prompts, settings, options, root / "b")
        same = all(store_a.load_run(a).features.input_ids.equal(store_b.load_run(b).features.input_ids)
                   for a, b in zip(single.run_ids, ray_report.run_ids))
    tokens = single.tokens
    single_rate, ray_rate = tokens / single_s, ray_report.tokens / ray_s
    efficiency = ray_rate / single_rate
    print(f"{args.prompts} prompts x up to {args.new_tokens} tokens, {tokens:,} answer tokens, {cores} cores")
    print("| collection | wall s | tokens/s |")
    print("|---|---|---|")
    print(f"| (a) one process, {cores} threads | {single_s:.1f} | {single_rate:.1f} |")
    print(f"| (b) local Ray, {args.workers} workers x {max(1, cores // args.workers)} threads "
          f"(cluster start {startup_s:.1f} s not counted) | {ray_s:.1f} | {ray_rate:.1f} |")
    print(f"same answers token by token: {same}")
    print(f"projected: each added GPU adds about {efficiency:.2f} x one GPU's engine tokens/s (`benchmark collect` "
          "on that GPU), the share of compute this run kept through Ray; workers on their own GPUs share no cores")
    print(f"local Ray ({args.workers} workers) vs one process: {efficiency:.2f}x")
    of = f"{args.prompts} prompts x up to {args.new_tokens} tokens"
    return {"one_process_s": Number(single_s, "s", f"collection in one process, {cores} threads ({of})"),
            "one_process_tokens_per_s": Number(single_rate, "tokens/s", "answer tokens a second in one process"),
            "ray_s": Number(ray_s, "s", f"collection on {args.workers} local Ray workers ({of}; cluster start not "
                                        "counted)"),
            "ray_tokens_per_s": Number(ray_rate, "tokens/s", f"answer tokens a second on {args.workers} Ray workers"),
            "ray_cluster_start_s": Number(startup_s, "s", "starting the local Ray cluster"),
            "same_answers": Number(same, "", "the same answers token by token both ways"),
            "ray_vs_one_process": Number(efficiency, "x", "Ray's tokens/s over one process's")}
