"""Baseline length predictors the papers compare against (SSJF-Reg/MC, S3, TRAIL, PiA, LTR).

``encoder``: the proxy prompt encoder; ``proxy``: regression and bucket classifiers on prompt embeddings;
``pia``: asking the target for its own length estimate; ``ltr``: learning-to-rank scores.
"""
