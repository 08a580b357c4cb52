"""The rebuild floor's arithmetic: a teacher-forced pass's FLOPs, a drafter's multiply-adds, and the report."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

from lenscope.benchmarks.bench_rebuild_floor import (
    Work,
    drafter_macs,
    drafter_work,
    import_work,
    pia_work,
    report,
    sequence_flops,
)
from lenscope.benchmarks.bench_roofline import DecoderShape

TOY = DecoderShape.of(SimpleNamespace(num_hidden_layers=2, hidden_size=4, intermediate_size=8, num_attention_heads=2,
                                      num_key_value_heads=1, vocab_size=10))


def test_a_pass_counts_each_token_its_prefix_and_the_head_where_asked():
    head = 2 * 4 * 10
    layers = TOY.flops_per_token(0) - head
    # three tokens: weights three times, attention over 0, 1 and 2 earlier tokens, the head at each or at one
    assert sequence_flops(TOY, 3) == 3 * layers + 4 * 2 * 4 * (0 + 1 + 2) + 3 * head
    assert sequence_flops(TOY, 3, head_rows=1) == sequence_flops(TOY, 3) - 2 * head
    assert import_work(TOY, [3, 1]).flops == sequence_flops(TOY, 3) + sequence_flops(TOY, 1)
    assert import_work(TOY, [3, 1]).tokens == pia_work(TOY, [3, 1]).tokens == 4
    assert pia_work(TOY, [3]).flops == sequence_flops(TOY, 3, head_rows=1)


def test_a_drafter_counts_its_linear_layers_but_not_its_length_head():
    model = nn.Module()
    model.fuse = nn.Linear(6, 2, bias=False)
    model.mlp = nn.Sequential(nn.Linear(2, 3), nn.GELU())
    model.length_head = nn.Sequential(nn.Linear(2, 100))
    assert drafter_macs(model) == 6 * 2 + 2 * 3
    work = drafter_work("outlets", macs=18, attention=True, hidden=2, train_lengths=[3], epochs=2)
    assert work.tokens == 6 and work.flops == pytest.approx(3 * 2 * (2 * 18 * 3 + 4 * 2 * 3))
    assert drafter_work("no-decoder", 18, False, 2, [3], 2).flops == pytest.approx(3 * 2 * 2 * 18 * 3)


def test_the_report_ends_with_the_floor_against_the_goal():
    text = report([Work("import", "x", 10, 60e12), Work("drafter:outlets", "y", 5, 60e12)], gflops=100.0)
    assert "| import | x | 10 | 60 | 10.0 |" in text
    assert text.splitlines()[-1].startswith("rebuild floor: 20 min of matrix arithmetic at 100 GFLOP/s (float32, ")
    assert text.splitlines()[-1].endswith("against the goal of 60")
