"""Attribution: are high-entropy prompt tokens the ones a length head relies on?"""

import streamlit as st

from lenscope.analysis.papers import EGTP_ATTRIBUTION_R
from lenscope.app.attribution import show_evidence, show_evidence_payload
from lenscope.app.docs import docs_link
from lenscope.app.runner import run_job
from lenscope.app.study import dataset_picker, picked_shipped, shipped_notice
from lenscope.app.widgets import get_store, head_settings, model_picker, show_figure, show_table
from lenscope.figures.egtp import attribution_table, entropy_importance_scatter, pooled_scatter_points, token_bars
from lenscope.jobs.egtp.attribution import attribution_evidence
from lenscope.jobs.egtp.heads import attribute_prompt, attribution_job, stored_attribution

st.set_page_config(page_title="Attribution · lenscope", layout="wide")
st.title("Token attribution")
st.caption(f"EGTP's evidence: token entropy correlates with gradient importance I_t = ||dL_MSE/dh_t|| (paper: "
           f"Pearson r = {EGTP_ATTRIBUTION_R}); tested here with a learned head that has no entropy in its path.")
docs_link("guide/attribution")
store = get_store()
dataset = dataset_picker(store)
shipped = picked_shipped(store, dataset)
if shipped is not None:
    shipped_notice(store, shipped)
    st.header("The evidence test")
    found = shipped.evidence()
    if found is None:
        st.info(shipped.absent("evidence test"))
    else:
        st.caption(f"The plots show the tokens of {len(found[1]['test_tokens'])} of the {found[1]['runs']['test']} "
                   "test runs (to keep the shipped files small); every number is over all of them.")
        show_evidence_payload(*found, f"{shipped.dataset}-L{shipped.layer}")
    st.info("The gradient path through the model and typed prompts need a dataset of your own store: pick one in "
            "the sidebar, or run the starter study above.")
elif dataset is not None:
    layer, alpha = head_settings()
    st.header("The evidence test")
    st.caption("Importance is normalised within each run (÷ the run's mean), so a run's error and its token count "
               "do not set its tokens' level; the permutation null shuffles entropies within each run; the partial "
               "correlation removes token position and log activation norm; CIs are bootstraps over runs.")
    if st.button("Compute the evidence (trains the attention head; needs the static heads)"):
        run_job(lambda cb: attribution_evidence(store, dataset, layer, on_progress=cb))
    show_evidence(store, dataset, layer)

    st.header("Gradient path through the model")
    st.markdown(
        "The earlier, cruder view: importance of a prompt token = L2 norm of the gradient of a static head's MSE "
        "with respect to its hidden state at the **attribution layer**, pooled over runs without normalisation. "
        "At the head's own layer an EGTP head's importance follows its entropy weights by construction and a "
        "mean head gives every token of a prompt the same importance; below the head layer the gradient runs "
        "through the model's own layers."
    )
    attr_layer = int(st.sidebar.number_input("Attribution layer", min_value=0, max_value=layer, value=min(15, layer)))
    if st.button("Compute attribution (trains missing heads)"):
        target = model_picker() if attr_layer < layer else None
        run_job(lambda cb: attribution_job(store, dataset, layer, attr_layer, alpha, target, cb))
    result = stored_attribution(store, dataset, layer, attr_layer, alpha)
    if result is None:
        st.info(f"No attribution for dataset {dataset!r}, head layer {layer}, attribution layer {attr_layer} yet: "
                f"click the button above or run `python -m lenscope train-egtp --dataset {dataset} --layer {layer}` "
                f"then `python -m lenscope attribution --dataset {dataset} --layer {layer} --attr-layer {attr_layer}`.")
    else:
        summaries = {s["head"]: s for s in result["summaries"]}
        st.subheader("Entropy vs importance over the test prompts")
        show_table(attribution_table(result["summaries"], EGTP_ATTRIBUTION_R), f"attribution-{dataset}")
        head_name = st.radio("Head", list(summaries), horizontal=True)
        runs = result["runs"]
        entropy, importance = pooled_scatter_points(runs, head_name)
        show_figure(entropy_importance_scatter(entropy, importance, summaries[head_name], EGTP_ATTRIBUTION_R),
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
