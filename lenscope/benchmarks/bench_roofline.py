"""The collection benchmark's ceiling on this machine, from a measured roofline.

Counts the FLOPs and bytes of one decode step of the target (its linear layers, the full-vocabulary head whose
entropy every position records, attention over the KV cache) and measures on these cores, with the target's
own layer shapes: matrix-multiply GFLOP/s at batch 1, at the engine's 64 rows and at prefill's hundreds of rows,
in float32 and bfloat16, and the memory bandwidth. Each step's time on the roofline is the larger of its
compute time and its memory time. From those it predicts the per-token loop's tokens/s (batch 1, weights read
every token) and the engine's best tokens/s on ``benchmark collect --quick``'s shape (prompt tokens per answer
token, answer length, 64 rows), prints them beside the measured forward passes of the real model, and gives
the ceiling of the ``--quick`` speedup. The last line: ``roofline: --quick speedup ceiling ...``.

Usage: python -m lenscope benchmark roofline [--prompt-per-answer 2.25] [--answer 32] [--rows 64]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lenscope.benchmarks.records import Number, Numbers
from lenscope.benchmarks.timing import fastest_seconds, median_seconds

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class DecoderShape:
    """What a decode step's cost depends on: the target's layer sizes."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int

    @classmethod
    def of(cls, config) -> DecoderShape:
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size,
                   config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads),
                   config.vocab_size)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of every weight matrix one token passes through, the output head included."""
        kv = self.kv_heads * self.head_dim
        layer = [(self.hidden, self.hidden), (self.hidden, kv), (self.hidden, kv), (self.hidden, self.hidden),
                 (self.hidden, self.intermediate), (self.hidden, self.intermediate), (self.intermediate, self.hidden)]
        return layer * self.layers + [(self.hidden, self.vocab)]

    def weight_params(self) -> int:
        return sum(i * o for i, o in self.linear_shapes())

    def flops_per_token(self, context: int) -> float:
        """Multiply-adds x 2 of one token: every weight once, and attention's scores and sums over ``context``."""
        return 2.0 * self.weight_params() + 4.0 * self.layers * self.hidden * context

    def kv_bytes_per_token(self, context: int, itemsize: int) -> float:
        """Bytes of KV cache one row reads in a decode step at ``context``."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * context * itemsize


def matmul_gflops(shape: DecoderShape, rows: int, dtype: torch.dtype, repeats: int = 7) -> float:
    """GFLOP/s of ``rows`` tokens through every distinct weight shape of the target (one layer's and the head),
    as ``nn.Linear`` multiplies them (weights ``[out, in]``), weighted as a token meets them."""
    shapes = {s: shape.linear_shapes().count(s) for s in set(shape.linear_shapes())}
    total_flops, total_s = 0.0, 0.0
    for (n_in, n_out), count in shapes.items():
        x, w = torch.randn(rows, n_in, dtype=dtype), torch.randn(n_out, n_in, dtype=dtype)
        seconds = fastest_seconds(lambda x=x, w=w: F.linear(x, w), repeats)
        total_flops += 2.0 * rows * n_in * n_out * count
        total_s += seconds * count
    return total_flops / total_s / 1e9


def bandwidth_gbs(megabytes: int = 512, repeats: int = 7) -> float:
    """Read bandwidth in GB/s: a sum over a buffer far larger than the caches."""
    buffer = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    return buffer.numel() * 4 / fastest_seconds(lambda: buffer.sum(), repeats) / 1e9


@dataclass(frozen=True)
class Machine:
    """Measured rates of these cores for one dtype."""

    gflops_1: float
    gflops_rows: float
    gflops_prefill: float
    gbs: float


def measure(shape: DecoderShape, dtype: torch.dtype, rows: int) -> Machine:
    return Machine(matmul_gflops(shape, 1, dtype), matmul_gflops(shape, rows, dtype),
                   matmul_gflops(shape, 512, dtype), bandwidth_gbs())


def step_seconds(flops: float, gflops: float, nbytes: float, gbs: float) -> float:
    """Roofline time: the larger of the compute time and the memory time."""
    return max(flops / (gflops * 1e9), nbytes / (gbs * 1e9))


def roofline_steps(shape: DecoderShape, m: Machine, itemsize: int, prompt: float, answer: int,
                   rows: int) -> dict[str, float]:
    """Roofline seconds of a batch-1 decode step, of a ``rows``-row decode step per row (both at the context of
    the middle of an ``answer`` after a ``prompt``) and of a prefill token: the keys of :func:`measured_steps`."""
    context = prompt + answer / 2
    weights = shape.weight_params() * itemsize
    kv = shape.kv_bytes_per_token(context, itemsize)
    return {"loop step": step_seconds(shape.flops_per_token(context), m.gflops_1, weights + kv, m.gbs),
            "engine step per row": step_seconds(rows * shape.flops_per_token(context), m.gflops_rows,
                                                weights + rows * kv, m.gbs) / rows,
            "prefill token": shape.flops_per_token(prompt / 2) / (m.gflops_prefill * 1e9)}


def answer_rate(steps: dict[str, float], decode: str, prompt_per_answer: float) -> float:
    """Answer tokens/s when each costs one ``decode`` step of ``steps`` and ``prompt_per_answer`` prefill tokens."""
    return 1 / (steps[decode] + prompt_per_answer * steps["prefill token"])


def ceilings(shape: DecoderShape, m: Machine, itemsize: int, prompt_per_answer: float, answer: int,
             rows: int) -> dict[str, float]:
    """Roofline tokens/s of the loop and the engine, and the speedup ceiling, on a workload of ``answer`` tokens
    after prompts of ``prompt_per_answer * answer`` tokens."""
    steps = roofline_steps(shape, m, itemsize, prompt_per_answer * answer, answer, rows)
    loop = answer_rate(steps, "loop step", prompt_per_answer)
    engine = answer_rate(steps, "engine step per row", prompt_per_answer)
    return {"loop": loop, "engine": engine, "ratio": engine / loop}


@torch.no_grad()
def measured_steps(target, rows: int, prompt: int) -> dict[str, float]:
    """Seconds of the real model: a batch-1 decode step, a ``rows``-row decode step (both after ``prompt``
    tokens) and a prefill token, with ``output_hidden_states`` as collection records them."""
    from transformers import DynamicCache

    def step(batch: int) -> float:
        ids = torch.randint(100, 1000, (batch, prompt))
        cache = DynamicCache()
        target.model(input_ids=ids, cache=cache, use_cache=True)
        one = torch.randint(100, 1000, (batch, 1))

        def decode():
            target.model(input_ids=one, cache=cache, use_cache=True, output_hidden_states=True)
            cache.crop(-1)  # back to the prompt: every timed step sees the same context

        return median_seconds(decode, 7, warmup=3)

    prefill = median_seconds(lambda: target.model(input_ids=torch.randint(100, 1000, (4, prompt)),
                                                  output_hidden_states=True), 5, warmup=3) / (4 * prompt)
    return {"loop step": step(1), "engine step per row": step(rows) / rows, "prefill token": prefill}


def figures(dtype: str, m: Machine, c: dict[str, float], rows: int) -> Numbers:
    """One dtype's measured rates, tokens/s and speedup ceiling."""
    rates = {"matmul_gflops_1": (m.gflops_1, "1 row"), f"matmul_gflops_{rows}": (m.gflops_rows, f"{rows} rows"),
             "matmul_gflops_512": (m.gflops_prefill, "512 rows")}
    tokens = {"loop": "the per-token loop's answer tokens/s on the roofline",
              "engine": "the engine's answer tokens/s on the roofline",
              "loop measured": "the loop's answer tokens/s with the model's forward passes as measured",
              "engine forward": "the engine's answer tokens/s with the model's forward passes as measured"}
    return ({f"{dtype}_{k}": Number(v, "GFLOP/s", f"{dtype} matmul rate at {n}, the target's shapes")
             for k, (v, n) in rates.items()}
            | {f"{dtype}_bandwidth_gbs": Number(m.gbs, "GB/s", "read bandwidth, a sum over 512 MB")}
            | {f"{dtype}_{k.replace(' ', '_')}_tokens_per_s": Number(c[k], "tokens/s", f"{dtype}: {what}")
               for k, what in tokens.items() if k in c}
            | {f"{dtype}_speedup_ceiling": Number(c["ratio"], "x", f"{dtype}: the engine's roofline tokens/s over the "
                                                                  "loop's as it runs (its roofline under --no-model)")})


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-per-answer", type=float, default=2.25,
                        help="prompt tokens per answer token (--quick's ShareGPT prompts: 2.25)")
    parser.add_argument("--answer", type=int, default=32, help="answer tokens per row (--quick: 32)")
    parser.add_argument("--rows", type=int, default=64, help="engine rows (--quick: 64)")
    parser.add_argument("--no-model", action="store_true",
                        help="skip the real model's measured steps (the ceiling is then against the loop's roofline, "
                             "not the loop as it runs)")
    args = parser.parse_args(argv)
    from lenscope.models.target import TargetModel

    lines, results, numbers = [], {}, {}
    for name, dtype in DTYPES.items():
        target = TargetModel.load(None, device="cpu", dtype=name)
        shape = DecoderShape.of(target.config)
        m = measure(shape, dtype, args.rows)
        itemsize = torch.finfo(dtype).bits // 8
        c = ceilings(shape, m, itemsize, args.prompt_per_answer, args.answer, args.rows)
        weights = shape.weight_params()
        lines.append(f"## {name}: {weights / 1e6:.1f} M weights ({weights * itemsize / 1e6:.0f} MB), "
                     f"{shape.flops_per_token(0) / 1e6:.0f} MFLOP a token; {torch.get_num_threads()} threads")
        lines.append(f"matmul GFLOP/s at 1 / {args.rows} / 512 rows: {m.gflops_1:.1f} / {m.gflops_rows:.1f} / "
                     f"{m.gflops_prefill:.1f}; read bandwidth {m.gbs:.1f} GB/s")
        prompt = round(args.prompt_per_answer * args.answer)
        predicted = roofline_steps(shape, m, itemsize, prompt, args.answer, args.rows)
        measured = {} if args.no_model else measured_steps(target, args.rows, prompt)
        lines.append("| | roofline ms | measured ms (model forward) | measured / roofline |")
        lines.append("|---|---|---|---|")
        for k, v in predicted.items():
            got = measured.get(k)
            lines.append(f"| {k} | {v * 1e3:.2f} | " + (f"{got * 1e3:.2f} | {got / v:.1f}x |" if got else "- | - |"))
        if measured:  # the loop as it runs here: the speedup's denominator is the real loop, not its roofline
            loop = answer_rate(measured, "loop step", args.prompt_per_answer)
            forward = answer_rate(measured, "engine step per row", args.prompt_per_answer)
            c = {**c, "loop measured": loop, "engine forward": forward, "ratio": c["engine"] / loop}
        lines.append(f"roofline tokens/s: loop {c['loop']:.1f}, engine {c['engine']:.1f} (answer tokens, "
                     f"{args.prompt_per_answer} prompt tokens each)"
                     + (f"; with the model's forward passes as measured: loop {c['loop measured']:.1f}, engine "
                        f"{c['engine forward']:.1f}" if measured else "")
                     + f": speedup ceiling {c['ratio']:.2f}x")
        results[name] = c
        numbers |= figures(name, m, c, args.rows)
        del target
    print("\n".join(lines))
    against = " against the loop's own roofline (--no-model: the loop was not run)" if args.no_model else ""
    print(f"roofline: --quick speedup ceiling {results['float32']['ratio']:.2f}x in float32, "
          f"{results['bfloat16']['ratio']:.2f}x in bfloat16{against} (target 10x)")
    return numbers


if __name__ == "__main__":
    main()
