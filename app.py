"""lenscope home: what the app is, which model is loaded, and what the store holds."""

import streamlit as st

from lenscope.ui import get_store, model_picker

st.set_page_config(page_title="lenscope", layout="wide")
st.title("lenscope")
st.markdown(
    "Why can a model's own internals predict **how long it will answer**? lenscope runs a target model "
    "live and shows the evidence from two papers:\n"
    "- **EGTP** (ICLR 2026): per-token next-token entropy, entropy-guided token pooling, a soft-label "
    "length head, progressive remaining-length prediction (PLP) and gradient-attribution evidence.\n"
    "- **OUTLETS** (arXiv 2609.01068): an EAGLE-3-style speculative drafter with a length head, compared "
    "with probes on the target's hidden states, and length-aware scheduling in disaggregated serving.\n\n"
    "Pick a page in the sidebar. Long jobs also run from the command line (`python -m lenscope --help`)."
)

target = model_picker()
store = get_store()

st.subheader("Model")
if target is None:
    st.warning("No model loaded: fix the model field in the sidebar.")
else:
    st.markdown(f"`{target.source.spec}` · {target.num_layers} layers · hidden size {target.hidden_size} · "
                f"context {target.context_length} · {target.dtype} on **{target.device.type}** · "
                f"recorded layers {target.default_layers()}")

st.subheader("Store")
st.caption(f"Database: `{store.engine.url.render_as_string(hide_password=True)}`")
datasets = store.datasets_frame()
runs = store.runs_frame()
predictors = store.predictors_frame()
c1, c2, c3 = st.columns(3)
c1.metric("Runs (generations)", len(runs))
c2.metric("Datasets", len(datasets))
c3.metric("Trained predictors", len(predictors))
if datasets.empty:
    st.info("No dataset yet. Collect one with `python -m lenscope collect --n 200 --dataset default` "
            "(generates answers with the target model and stores their true lengths).")
else:
    st.dataframe(datasets[["name", "runs", "created"]], hide_index=True, width="stretch")
if not predictors.empty:
    st.dataframe(predictors[["name", "kind", "metrics", "created"]], hide_index=True, width="stretch")
