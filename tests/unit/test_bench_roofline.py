"""The roofline's arithmetic: a decoder's weights, FLOPs and bytes per token, and the ceilings it predicts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lenscope.benchmarks.bench_roofline import DecoderShape, Machine, ceilings, step_seconds

SMOLLM2 = SimpleNamespace(num_hidden_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                          num_key_value_heads=3, vocab_size=49152)


def test_smollm2_counts_its_weights_and_flops():
    shape = DecoderShape.of(SMOLLM2)
    assert shape.head_dim == 64
    # per layer: q and o 576x576, k and v 576x192, gate/up 576x1536, down 1536x576; then the 49,152-token head
    per_layer = 2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536
    assert shape.weight_params() == 30 * per_layer + 576 * 49152 == 134_479_872
    assert shape.flops_per_token(0) == 2 * shape.weight_params()
    assert shape.flops_per_token(100) - shape.flops_per_token(0) == 4 * 30 * 576 * 100
    assert shape.kv_bytes_per_token(100, 4) == 2 * 30 * 3 * 64 * 100 * 4


def test_a_step_takes_the_longer_of_compute_and_memory():
    assert step_seconds(2e9, 100, 1e6, 10) == pytest.approx(0.02)    # compute-bound
    assert step_seconds(1e6, 100, 1e9, 10) == pytest.approx(0.1)     # memory-bound


def test_batching_lifts_the_engine_over_the_memory_bound_loop():
    shape = DecoderShape.of(SMOLLM2)
    machine = Machine(gflops_1=20, gflops_rows=150, gflops_prefill=180, gbs=30)
    c = ceilings(shape, machine, itemsize=4, prompt_per_answer=2.25, answer=32, rows=64)
    # batch 1 reads all 538 MB of weights per token: about 18 ms at 30 GB/s, more than its compute at 20 GFLOP/s
    assert 1 / c["loop"] > 0.018
    assert c["engine"] > 2 * c["loop"] and c["ratio"] == pytest.approx(c["engine"] / c["loop"])
    # without prompts the engine is bounded by its decode steps alone
    assert ceilings(shape, machine, 4, 0.0, 32, 64)["engine"] > c["engine"]
