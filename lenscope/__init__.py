"""lenscope: interactive analysis of LLM output-length prediction (EGTP, PLP, OUTLETS)."""

__version__ = "0.1.0"
