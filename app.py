"""lenscope home: what the app is, which model is loaded, and what the store holds."""

import streamlit as st

from lenscope.app.runner import run_job
from lenscope.app.widgets import get_store, model_picker
from lenscope.jobs.collect import collect_sample
from lenscope.jobs.runs import GenerationSettings

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
    st.info("No dataset yet. Collect one below, or from the command line with "
            "`python -m lenscope collect --n 200 --dataset default` (answers, true lengths, features).")
else:
    st.dataframe(datasets[["name", "runs", "created"]], hide_index=True, width="stretch")
if target is not None:
    with st.expander("Collect a dataset", expanded=datasets.empty):
        c1, c2, c3, c4 = st.columns(4)
        name = c1.text_input("Dataset name", value="default", key="collect_name")
        n = int(c2.number_input("Prompts", min_value=1, max_value=5000, value=40, key="collect_n"))
        humaneval = c3.slider("HumanEval share", 0.0, 1.0, 0.25, key="collect_humaneval")
        max_new = int(c4.number_input("Max new tokens", min_value=1, max_value=4096, value=1024,
                                      key="collect_max_new"))
        if st.button("Collect", type="primary"):
            report = run_job(lambda on_progress: collect_sample(
                store, target, name.strip() or "default", n, {"sharegpt": 1 - humaneval, "humaneval": humaneval},
                GenerationSettings(max_new_tokens=max_new), on_progress=on_progress), start="Loading prompts...")
            if report is not None:
                st.success(f"{len(report.run_ids)} runs in {name!r}: {report.generated} generated "
                           f"({report.finished} ended with end-of-turn, {report.tokens_per_s:.0f} tokens/s), "
                           f"{report.cached} from the cache.")
if not predictors.empty:
    st.dataframe(predictors[["name", "kind", "metrics", "created"]], hide_index=True, width="stretch")
