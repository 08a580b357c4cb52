"""Synthetic stored runs for the EGTP tests: the answer length is carried by the prompt's
highest-entropy token, so a head on pooled prompt states can learn it."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from lenscope.models.engine import Generation
from lenscope.models.target import SequenceFeatures
from tests.fakes import cut_generation

SYNTHETIC_LAYER = 30


def fake_target(hidden_size: int) -> SimpleNamespace:
    """What Store.save_run needs from a target, for runs that no real model produced."""
    return SimpleNamespace(key=f"synthetic-d{hidden_size}", source=SimpleNamespace(spec="synthetic", gguf_file=""),
                           num_layers=SYNTHETIC_LAYER, hidden_size=hidden_size, dtype="float32")


def synthetic_dataset(store, name: str = "syn", n: int = 40, d: int = 8, seed: int = 0,
                      censored_every: int = 0, other_layers: tuple[int, ...] = (),
                      censored_answer_tokens: int | None = None) -> list[int]:
    """``n`` runs in dataset ``name`` (scenarios alternate chat/reasoning; every ``censored_every``-th run hit its
    cap, when given, with features of its first ``censored_answer_tokens`` answer tokens only when that is given, as
    the study imports them; ``other_layers`` are stored too, each a noisy copy of the head layer's states); returns
    their run ids."""
    gen = torch.Generator().manual_seed(seed)
    target = fake_target(d)
    dataset_id = store.ensure_dataset(name, store.ensure_model(target), {"synthetic": True})
    run_ids = []
    for i in range(n):
        p = int(torch.randint(5, 10, (1,), generator=gen))
        signal = float(torch.rand(1, generator=gen)) * 2 - 1
        length = 10 + round(20 * (signal + 1))
        total = p + length
        hidden = torch.randn(total, d, generator=gen)
        entropy = torch.rand(total, generator=gen) * 2
        top = int(entropy[:p].argmax())
        entropy[top] = 4.0
        hidden[top, 0] = 3 * signal
        feats = SequenceFeatures(input_ids=torch.arange(total), tokens=[f"t{j}" for j in range(total)],
                                 entropy=entropy, topk_ids=torch.zeros(total, 5, dtype=torch.long),
                                 topk_probs=torch.full((total, 5), 0.2),
                                 hidden={SYNTHETIC_LAYER: hidden, **{layer: hidden + torch.randn(
                                     total, d, generator=gen) * layer / 30 for layer in other_layers}})
        finished = not censored_every or i % censored_every != censored_every - 1
        generation = Generation(prompt_len=p, features=feats, text="x" * length, finished=finished,
                                settings={"seed": i}, output_ids=[0] * length)
        if not finished and censored_answer_tokens is not None:
            generation = cut_generation(generation, censored_answer_tokens)
        run_id = store.save_run(target, f"synthetic prompt {i}", generation)
        store.add_to_dataset(dataset_id, run_id, "chat" if i % 2 else "reasoning")
        run_ids.append(run_id)
    return run_ids
