"""Feature-extraction cost, measured side by side in one run on the embedded model.

Prints ratios (lower is better):
- recording generation (entropy + top-5 + 4 hidden layers kept per token) vs HF ``generate``;
- one-pass prompt features vs a bare forward pass;
- a cache hit (load from the store) vs generating the answer.

Usage: python benchmarks/bench_features.py [--tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cache.store import Store  # noqa: E402
from lenscope.runs import generate_cached  # noqa: E402
from benchmarks.timing import median_seconds  # noqa: E402
from models.target import GenerationSettings, TargetModel  # noqa: E402

PROMPT = "Explain in a few sentences how a hash map works."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    target = TargetModel.load()
    settings = GenerationSettings(max_new_tokens=args.tokens, temperature=0.0)
    ids = torch.tensor([target.chat_ids(PROMPT)])
    # a prompt-independent stop: generate exactly `tokens` tokens in both paths
    target.stop_ids, stops = set(), target.stop_ids

    def hf_generate():
        with torch.no_grad():
            target.model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)

    t_hf = median_seconds(hf_generate, args.repeats)
    t_rec = median_seconds(lambda: target.generate(PROMPT, settings), args.repeats)

    def bare_forward():
        with torch.no_grad():
            target.model(ids)

    t_fwd = median_seconds(bare_forward, args.repeats)
    t_feat = median_seconds(lambda: target.sequence_features(ids[0].tolist()), args.repeats)
    target.stop_ids = stops
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(url=f"sqlite:///{tmp}/bench.db", tensor_dir=Path(tmp) / "tensors")
        start = time.perf_counter()
        run, _ = generate_cached(store, target, PROMPT, settings)
        t_miss = time.perf_counter() - start
        t_hit = median_seconds(lambda: generate_cached(store, target, PROMPT, settings), args.repeats)
        size = sum(p.stat().st_size for p in (Path(tmp) / "tensors").rglob("*.safetensors"))
    n = len(run.features)
    print(f"model {target.source.spec} on {target.device.type}, {args.tokens} new tokens, "
          f"{torch.get_num_threads()} threads")
    print(f"recording generate / HF generate      : {t_rec / t_hf:6.2f}x  ({t_rec:.3f}s vs {t_hf:.3f}s)")
    print(f"one-pass features / bare forward      : {t_feat / t_fwd:6.2f}x  ({t_feat:.4f}s vs {t_fwd:.4f}s)")
    print(f"cache hit / generate+store (miss)     : {t_hit / t_miss:6.3f}x  ({t_hit:.3f}s vs {t_miss:.3f}s)")
    print(f"stored features                       : {size / n / 1024:6.2f} KiB per token ({n} tokens)")


if __name__ == "__main__":
    main()
