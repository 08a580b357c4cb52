"""Remaining length: progressive length prediction (PLP) during a live generation."""

import streamlit as st

from lenscope.analysis.papers import EGTP_PLP_MAE
from lenscope.app.docs import docs_link
from lenscope.app.runner import error_boundary, run_job
from lenscope.app.study import dataset_picker, picked_shipped, shipped_notice
from lenscope.app.widgets import get_store, head_settings, model_picker, show_figure
from lenscope.figures.egtp import mae_by_step_figure, remaining_length_figure
from lenscope.jobs.egtp.heads import (
    PLP_KIND,
    load_predictor,
    plp_mae_curve,
    plp_trajectory,
    predictor_name,
    train_plp,
)
from lenscope.jobs.runs.generate import GenerationSettings, generate_cached

st.set_page_config(page_title="Remaining length · lenscope", layout="wide")
st.title("Remaining length (PLP)")
st.caption("After every generated token, the PLP head predicts how many tokens are still to come.")
docs_link("guide/remaining-length")
store = get_store()
dataset = dataset_picker(store)
shipped = picked_shipped(store, dataset)
if shipped is not None:
    shipped_notice(store, shipped)
    curve = shipped.plp_curve()
    if curve is None:
        st.info(shipped.absent("PLP curve"))
    else:
        st.subheader(f"MAE vs observed steps (test split of the study, layer {shipped.layer})")
        show_figure(mae_by_step_figure(curve, EGTP_PLP_MAE), "mae-by-step")
        st.caption("The PLP head trained on the study's train split; the cross-validated verdict on whether its "
                   "MAE falls from step 0 to step 32 is on the home page's claims table.")
    st.info("Live generation with its remaining-length curve needs a PLP head of your own store: pick a dataset of "
            "yours in the sidebar, or run the starter study above.")
elif dataset is not None:
    layer, alpha = head_settings()
    name = predictor_name(PLP_KIND, dataset, layer)
    if st.button("Train PLP head"):
        run_job(lambda on_progress: train_plp(store, dataset, layer, alpha, on_progress=on_progress))
    try:
        head, meta, predictor_id = load_predictor(store, PLP_KIND, name)
    except ValueError:
        head = None
        st.info(f"No PLP head for dataset {dataset!r} at layer {layer} yet: click the button above or run "
                f"`python -m lenscope train-plp --dataset {dataset} --layer {layer}`.")
    if head is not None:
        st.subheader("MAE vs observed steps (test split)")
        show_figure(mae_by_step_figure(plp_mae_curve(store, predictor_id), EGTP_PLP_MAE), "mae-by-step")
        st.subheader("Live generation")
        prompt = st.text_area("Prompt", "Explain in a few sentences why the sky is blue.")
        max_new = st.slider("Max new tokens", 8, 512, 128)
        seed = int(st.number_input("Seed", min_value=0, max_value=2**31 - 1, value=0))
        if st.button("Generate and predict"):
            target = model_picker()
            if target is not None:
                layers = sorted(set(target.default_layers()) | {meta["layer"]})
                settings = GenerationSettings(max_new, 0.7, 1.0, seed)
                generated = run_job(lambda on_progress: generate_cached(store, target, prompt, settings, layers,
                                                                        on_progress), start="generating")
                if generated is not None:
                    st.session_state["plp_run_id"] = generated[0].id
        run_id = st.session_state.get("plp_run_id")
        if run_id is not None:
            with error_boundary():
                run = store.load_run(run_id, layers=[meta["layer"]])
            st.caption(f"run {run.id}: {run.output_length} tokens, "
                       f"{'finished' if run.finished else 'cut at max_new_tokens'}")
            show_figure(remaining_length_figure(plp_trajectory(store, head, meta, run)), "remaining-length")
            st.text(run.response)
