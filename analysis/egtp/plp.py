"""Progressive length prediction (PLP): remaining-length samples at every decoding step.

Convention shared by every dynamic predictor in lenscope (EGTP-PLP here, OUTLETS probes elsewhere):
a run with ``L`` generated tokens gives one sample per step ``t = 0 .. L-1`` (optionally capped at
``max_step``); the target is the remaining length ``L - t`` (>= 1), and the features visible at step ``t``
are the token positions ``< prompt_len + t`` (the prompt plus the first ``t`` generated tokens).
Evaluation rows are (run_id, step, predicted, true, split) for steps 0..32.

PLP input (``Aggregate``) here is ``concat(prompt feature, summary of generated states, log1p(t))``:
the prompt feature is the EGTP-pooled prompt, the summary is the EGTP pooling of the ``t`` generated
tokens' hidden states (zeros at ``t = 0``), and ``log1p(t)`` tells the head how far decoding has got
(the paper's Aggregate is a plain concat; the step count is our addition and is cheap to know).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

EVAL_STEPS = 32


def plp_steps(output_length: int, max_step: int | None = None) -> np.ndarray:
    """Steps ``t`` with a remaining-length sample: ``0 .. L-1``, capped at ``max_step``."""
    last = output_length - 1 if max_step is None else min(output_length - 1, max_step)
    return np.arange(0, last + 1)


def training_steps(output_length: int, dense: int, later: int) -> np.ndarray:
    """Steps a run trains a progressive predictor on: every step ``0 .. dense``, then ``later`` steps evenly
    spread over the rest (all of them when there are fewer). Neighbouring steps share almost all their prefix,
    so the spread keeps what the run teaches at a fraction of the samples."""
    steps = plp_steps(output_length)
    early, rest = steps[steps <= dense], steps[steps > dense]
    if len(rest) > later:
        rest = rest[np.unique(np.linspace(0, len(rest) - 1, later).round().astype(int))]
    return np.concatenate([early, rest])


def visible_positions(prompt_len: int, step: int) -> int:
    """Number of leading token positions whose features exist after ``step`` generated tokens."""
    return prompt_len + step


def remaining_frame(run_id: int, output_length: int, max_step: int | None = None) -> pd.DataFrame:
    """Samples of one run: columns run_id, step, true (= L - step)."""
    steps = plp_steps(output_length, max_step)
    return pd.DataFrame({"run_id": run_id, "step": steps, "true": output_length - steps})


def plp_inputs(prompt_feature: torch.Tensor, generated_prefix: torch.Tensor, steps) -> torch.Tensor:
    """PLP inputs [S, 2d + 1] for ``steps``; ``generated_prefix[t-1]`` summarises the first ``t`` tokens."""
    steps_t = torch.tensor(np.array(steps), dtype=torch.long)
    d = prompt_feature.shape[0]
    summary = torch.zeros(len(steps_t), d, dtype=prompt_feature.dtype)
    seen = steps_t > 0
    if seen.any():
        summary[seen] = generated_prefix[steps_t[seen] - 1].to(prompt_feature.dtype)
    step_feature = torch.log1p(steps_t.to(prompt_feature.dtype))[:, None]
    return torch.cat([prompt_feature.expand(len(steps_t), d), summary, step_feature], dim=1)
