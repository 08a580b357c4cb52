"""Pure computations of lenscope: entropy statistics, pooling, heads, PLP, attribution, probes,
the scheduler simulator and metrics. Nothing here imports Streamlit."""
