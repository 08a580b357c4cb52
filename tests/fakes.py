"""Model-free stand-ins for store tests: a target identity and synthetic generations."""

from dataclasses import replace
from types import SimpleNamespace

import torch

from lenscope.models.engine import Generation
from lenscope.models.target import SequenceFeatures


def fake_target(key: str = "fake-model") -> SimpleNamespace:
    """Just the attributes the store reads from a TargetModel."""
    return SimpleNamespace(key=key, source=SimpleNamespace(spec="fake", gguf_file=None), num_layers=2,
                           hidden_size=4, dtype="float32")


def fake_generation(prompt_len: int, output_length: int, seed: int = 0, layers=(1, 2)) -> Generation:
    """A generation with random features of the right shapes."""
    g = torch.Generator().manual_seed(seed)
    n = prompt_len + output_length
    feats = SequenceFeatures(
        input_ids=torch.randint(0, 100, (n,), generator=g), tokens=[f"t{i}" for i in range(n)],
        entropy=torch.rand(n, generator=g) * 5, topk_ids=torch.randint(0, 100, (n, 5), generator=g),
        topk_probs=torch.rand(n, 5, generator=g), hidden={layer: torch.randn(n, 4, generator=g) for layer in layers},
    )
    return Generation(prompt_len=prompt_len, features=feats, text="x" * output_length, finished=True,
                      settings={"seed": seed}, output_ids=feats.input_ids[prompt_len:].tolist())


def cut_generation(generation: Generation, answer_tokens: int) -> Generation:
    """``generation`` with the features of its prompt and first ``answer_tokens`` answer tokens only (what the
    study's import keeps of a censored run); the answer ids stay whole."""
    f, n = generation.features, generation.prompt_len + answer_tokens
    feats = SequenceFeatures(input_ids=f.input_ids[:n], tokens=f.tokens[:n], entropy=f.entropy[:n],
                             topk_ids=f.topk_ids[:n], topk_probs=f.topk_probs[:n],
                             hidden={layer: h[:n] for layer, h in f.hidden.items()})
    return replace(generation, features=feats, finished=False)
