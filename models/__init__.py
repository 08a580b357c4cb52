"""Loading target models and drafters; extracting hidden states and logit summaries."""
