"""Baseline length predictors the papers compare against (SSJF-Reg/MC, S3, TRAIL, PiA, LTR).

``encoder``: the proxy prompt encoder; ``proxy``: regression and bucket classifiers on prompt embeddings;
``pia``: asking the target for its own length estimate; ``ltr``: learning-to-rank scores.
"""

# The paper each baseline comes from, by the name lenscope gives it (``train-baselines --only``, the predictor
# catalog): the CLI's help and the UI show it beside the baseline's description.
SSJF = ("Qiu et al., AIOps 2024, 'Efficient Interactive LLM Serving with Proxy Model-based Sequence Length "
        "Prediction' (SSJF)")
PAPERS = {
    "ssjf-reg": SSJF,
    "ssjf-mc": SSJF,
    "s3": "Jin et al., NeurIPS 2023, 'S3: Increasing GPU Utilization during Generative Inference for Higher "
          "Throughput'",
    "trail": "Shahout et al., ICLR 2025, 'Don't Stop Me Now: Embedding Based Scheduling for LLMs' (TRAIL)",
    "pia": "Zheng et al., NeurIPS 2023, 'Response Length Perception and Sequence Scheduling: An LLM-Empowered LLM "
           "Inference Pipeline' (Perception in Advance)",
    "ltr": "Fu et al., NeurIPS 2024, 'Efficient LLM Scheduling by Learning to Rank'",
}
