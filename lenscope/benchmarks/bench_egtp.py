"""Overhead of EGTP on the embedded target, measured side by side in one run.

1. Static prediction: (forward pass + entropy + EGTP pooling + head) vs a bare forward pass of a prompt.
2. PLP: one head call (prefix-pool update + head) vs one KV-cached decode step.
Prints median timings and their ratios. Usage: ``python -m lenscope benchmark egtp [--repeats 20]``.
"""

from __future__ import annotations

import argparse

import torch

from lenscope.analysis.core.soft_label_head import SoftLabelHead, log_bins
from lenscope.analysis.egtp.plp import plp_inputs
from lenscope.analysis.egtp.pooling import pool
from lenscope.analysis.egtp.training import HeadConfig
from lenscope.benchmarks.records import Number, Numbers
from lenscope.benchmarks.timing import median_seconds
from lenscope.models.logits import summarize_logits
from lenscope.models.target import TargetModel

PROMPT = ("Explain how a length-aware scheduler can reduce padding when batching requests of very different "
          "output lengths, and give a short example with three requests.")


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--layer", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = TargetModel.load()
    model, d = target.model, target.hidden_size
    ids = torch.tensor([target.chat_ids(PROMPT)], device=target.device)
    cfg = HeadConfig()
    static_head = SoftLabelHead(d, log_bins(torch.arange(1, 513).float().numpy(), cfg.bins), cfg.hidden).eval()
    plp_head = SoftLabelHead(2 * d + 1, static_head.bins, cfg.hidden).eval()

    @torch.no_grad()
    def bare():
        return model(input_ids=ids).logits

    @torch.no_grad()
    def egtp():
        out = model(input_ids=ids, output_hidden_states=True)
        entropy = summarize_logits(out.logits[0], 5).entropy
        return static_head.predict(pool(out.hidden_states[args.layer][0].float(), entropy)[None])

    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    next_id = out.logits[0, -1].argmax().view(1, 1)

    @torch.no_grad()
    def copy_cache():
        """A fresh copy of the prompt's KV cache, so every timed decode step sees the same length."""
        cache = type(out.cache)(config=model.config)
        for layer_idx, layer in enumerate(out.cache.layers):
            cache.update(layer.keys.clone(), layer.values.clone(), layer_idx)
        return cache

    @torch.no_grad()
    def decode_step():
        return model(input_ids=next_id, cache=copy_cache(), use_cache=True).logits

    prompt_feature, prefix = torch.randn(d), torch.randn(64, d)
    running = {"num": torch.zeros(d, dtype=torch.float64), "den": torch.zeros((), dtype=torch.float64)}

    @torch.no_grad()
    def plp_step():
        h_new, ent_new = torch.randn(d), torch.rand(()) * 3
        w = torch.exp(ent_new.double())
        running["num"] += w * h_new
        running["den"] += w
        prefix[10] = (running["num"] / running["den"]).float()
        return plp_head.predict(plp_inputs(prompt_feature, prefix, [11]))

    t_bare, t_egtp = median_seconds(bare, args.repeats), median_seconds(egtp, args.repeats)
    t_step = median_seconds(decode_step, args.repeats) - median_seconds(copy_cache, args.repeats)
    t_plp = median_seconds(plp_step, args.repeats * 10)
    print(f"prompt tokens: {ids.shape[1]}, device: {target.device}, threads: {args.threads}")
    print(f"bare forward            {t_bare * 1e3:8.2f} ms")
    print(f"forward + EGTP + head   {t_egtp * 1e3:8.2f} ms   ratio {t_egtp / t_bare:.3f}")
    print(f"decode step (KV cache)  {t_step * 1e3:8.2f} ms")
    print(f"PLP update + head       {t_plp * 1e3:8.3f} ms   ratio to a decode step {t_plp / t_step:.4f}")
    of = f"median of {args.repeats}, {ids.shape[1]}-token prompt, {args.threads} thread(s) on {target.device}"
    return {"prompt_tokens": Number(int(ids.shape[1]), "tokens", "tokens of the timed prompt"),
            "bare_forward_ms": Number(t_bare * 1e3, "ms", f"a bare forward pass ({of})"),
            "egtp_forward_ms": Number(t_egtp * 1e3, "ms", f"forward + entropy + EGTP pooling + head ({of})"),
            "egtp_ratio": Number(t_egtp / t_bare, "x", "forward + EGTP + head over a bare forward"),
            "decode_step_ms": Number(t_step * 1e3, "ms", f"one KV-cached decode step ({of})"),
            "plp_step_ms": Number(t_plp * 1e3, "ms", f"a PLP prefix-pool update + head (median of "
                                                     f"{args.repeats * 10})"),
            "plp_ratio": Number(t_plp / t_step, "x", "PLP update + head over a decode step")}


if __name__ == "__main__":
    main()
