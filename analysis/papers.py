"""The two papers' reported numbers, each once, with where it is stated. The app shows them beside what the embedded
model measures; nothing here is computed.

EGTP: "Predicting LLM Output Length via Entropy-Guided Representations", ICLR 2026,
https://openreview.net/forum?id=3loQDtveWI (ForeLen benchmark, Qwen2.5-7B and other targets).
OUTLETS: W. Wen, Y. Liu, Y. Liu, W. Zeng, L. Zhou, C. Sun, J. Sun, T. Yu, "OUTLETS: Output-Length Prediction from
Speculative Decoding Backbones", arXiv:2609.01068 (2026).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# EGTP, pooling ablation table: MAE in tokens on ForeLen per scenario and their mean.
EGTP_POOLING_MAE = pd.DataFrame({
    "pooling": ["egtp", "max", "last", "mean"],
    "reasoning": [133.57, 137.88, 139.09, 142.40], "long_seq": [81.60, 122.74, 135.44, 173.85],
    "rl": [95.24, 98.46, 105.39, 149.92], "mean_mae": [103.47, 119.69, 126.64, 155.39],
})
# EGTP, attribution: Pearson r between token entropy and gradient importance I_t = ||dL_MSE/dh_t||_2.
EGTP_ATTRIBUTION_R = 0.451
# EGTP, progressive length prediction: MAE at 0 and at 32 observed decoding steps.
EGTP_PLP_MAE = {"rl": (95.24, 80.86), "long_seq": (81.60, 67.11)}
EGTP_PLP_FALL = float(np.mean([after / before - 1 for before, after in EGTP_PLP_MAE.values()]))
# EGTP, averaged over its models: MAE 29.16% below the strongest baseline and 55.09% below SSJF-Reg (relative change).
EGTP_VS_BASELINES = {"ssjf-reg": -0.5509, "ssjf-mc": -0.2916, "s3": -0.2916, "trail": -0.2916}

# OUTLETS, system-level evaluation: 1 prefill + 3 decode instances, 1,914 ShareGPT requests with prompts <= 50 tokens
# (mean output 1,127 tokens) at 100 QPS; short-request P99 latency 59.8 s (RR+FCFS) -> 39.0 s (LB+SJF), -34.8%.
OUTLETS_SERVING = {"requests": 1914, "max_prompt_tokens": 50, "mean_output_tokens": 1127, "qps": 100.0,
                   "short_p99_before_s": 59.8, "short_p99_after_s": 39.0, "short_p99_change": -0.348}
