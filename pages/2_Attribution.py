"""Attribution: are high-entropy prompt tokens the ones the length head relies on?"""

import streamlit as st

from lenscope.app.runner import run_job
from lenscope.app.study import dataset_picker
from lenscope.app.widgets import get_store, head_settings, model_picker, show_figure
from lenscope.figures.egtp import attribution_table, entropy_importance_scatter, pooled_scatter_points, token_bars
from lenscope.jobs.egtp import ATTRIBUTION_KIND, PAPER_PEARSON, attribute_prompt, attribution_config, attribution_job

st.set_page_config(page_title="Attribution · lenscope", layout="wide")
st.title("Token attribution")
st.markdown(
    "Importance of a prompt token = L2 norm of the gradient of the static head's MSE loss with respect to "
    "the token's hidden state at the **attribution layer**. At the head's own layer the gradient only "
    "passes the pooling: an EGTP head then gives importance proportional to its entropy weight *by "
    "construction*, a mean head gives every token of a prompt the same importance. Below the head layer "
    "the gradient runs through the model's own layers; **the mean-pooling head on that path is the fair "
    "test** of the paper's claim (no entropy in the gradient path)."
)
store = get_store()
dataset = dataset_picker(store)
if dataset is not None:
    layer, alpha = head_settings()
    attr_layer = int(st.sidebar.number_input("Attribution layer", min_value=0, max_value=layer, value=min(15, layer)))
    config = attribution_config(dataset, layer, attr_layer, alpha)
    if st.button("Compute attribution (trains missing heads)"):
        target = model_picker() if attr_layer < layer else None
        run_job(lambda cb: attribution_job(store, dataset, layer, attr_layer, alpha, target, cb))
    result = store.get_result(ATTRIBUTION_KIND, config)
    if result is None:
        st.info(f"No attribution for dataset {dataset!r}, head layer {layer}, attribution layer {attr_layer} yet: "
                f"click the button above or run `python -m lenscope train-egtp --dataset {dataset} --layer {layer}` "
                f"then `python -m lenscope attribution --dataset {dataset} --layer {layer} --attr-layer {attr_layer}`.")
    else:
        summaries = {s["head"]: s for s in result["summaries"]}
        st.subheader("Entropy vs importance over the test prompts")
        st.dataframe(attribution_table(result["summaries"], PAPER_PEARSON))
        head_name = st.radio("Head", list(summaries), horizontal=True)
        runs = result["runs"]
        entropy, importance = pooled_scatter_points(runs, head_name)
        show_figure(entropy_importance_scatter(entropy, importance, summaries[head_name], PAPER_PEARSON),
                    "entropy-importance")
        st.subheader("One prompt")
        source = st.radio("Prompt", ["test-set run", "type a prompt"], horizontal=True)
        if source == "test-set run":
            pick = st.selectbox("Run", runs, format_func=lambda r: f"run {r['run_id']}: "
                                f"{''.join(r['tokens'])[:80]!r} ({r['output_length']} tokens)")
            show_figure(token_bars(pick["tokens"], pick["entropy"], pick[f"importance_{head_name}"],
                                   f"run {pick['run_id']}, {head_name} head"), f"tokens-run-{pick['run_id']}")
        else:
            prompt = st.text_area("Prompt", "Write a short poem about autumn.")
            if st.button("Generate the answer (true length) and attribute"):
                target = model_picker()
                typed = run_job(lambda cb: attribute_prompt(store, target, dataset, layer, attr_layer, head_name,
                                                            prompt)) if target is not None else None
                if typed is not None:
                    show_figure(token_bars(typed.tokens, typed.entropy, typed.importance,
                                           f"typed prompt ({typed.output_length} answer tokens), {head_name} head"),
                                "tokens-typed-prompt")
