"""Drafter vs target: the OUTLETS drafter's length head against a TRAIL-style MLP probe on target states."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.app.outlets import curves_section, train_section
from lenscope.app.runner import run_job
from lenscope.app.widgets import get_store, model_picker, show_figure
from lenscope.figures.outlets import (
    ablation_table,
    acceptance_figure,
    mae_by_step_figure,
    paired_comparison_table,
    umap_figure,
)
from lenscope.jobs.outlets import UMAP_KIND, representation_umap_job, step_predictions, umap_config
from lenscope.jobs.results import compare_predictors

st.set_page_config(page_title="Drafter vs target · lenscope", layout="wide")
st.title("Drafter vs target")
st.caption("OUTLETS: a speculative drafter (EAGLE-3 style) with a length head, compared with an MLP probe "
           "on one target layer. Remaining length is predicted after prefill (static) and at every step.")
store = get_store()
target = model_picker()

drafters = store.predictors_frame("drafter")
probes = store.predictors_frame("probe")
if drafters.empty:
    st.info("No drafter trained yet: the starter study trains the OUTLETS drafter, its ablations and a target "
            "probe; or train one in the section below (or `python -m lenscope train-drafter`).")
    train_section(store, target, expanded=True)
    st.stop()

predictors = pd.concat([drafters, probes], ignore_index=True)
st.subheader("Ablations")
st.dataframe(ablation_table(predictors), hide_index=True)
if not probes.empty:
    st.subheader("Drafter vs probe, paired on the same test runs")
    c1, c2 = st.columns(2)
    first = c1.selectbox("Drafter", drafters["name"].tolist(), key="pair_drafter")
    second = c2.selectbox("Probe", probes["name"].tolist(), key="pair_probe")
    ids = predictors.set_index("name")["predictor_id"]
    st.dataframe(paired_comparison_table(compare_predictors(store, int(ids[first]), int(ids[second]))),
                 hide_index=True)

names = predictors["name"].tolist()
st.subheader("Dataset-wide MAE by decoding step")
default = [n for n in names if n.endswith(":outlets")][:1] + probes["name"].tolist()[:1]
chosen = st.multiselect("Predictors", names, default=default or names[:1], key="mae_predictors")
split = st.radio("Runs", ["evaluation split", "all splits"], horizontal=True, key="mae_split")
max_step = st.slider("Up to step", 0, 256, 128, key="mae_max_step")
if chosen:
    frames = step_predictions(store, predictors, chosen, evaluation_only=split == "evaluation split")
    show_figure(mae_by_step_figure(frames, max_step), "mae-by-step")

rates = {row.name: row.metrics["acceptance"] for row in drafters.itertuples() if (row.metrics or {}).get("acceptance")}
if rates:
    st.subheader("Speculative acceptance")
    show_figure(acceptance_figure(rates), "acceptance")
    st.caption("Greedy drafts of k tokens verified against the target's greedy choice on the stored sequences "
               "(steps whose greedy token is not derivable from the stored path are left out).")

st.subheader("One prompt: remaining-length curves")
curves_section(store, target, drafters, probes)

st.subheader("UMAP of representations")
drafter_id = int(drafters.set_index("name").loc[st.session_state.get("curve_drafter", drafters["name"].iloc[0]),
                                                "predictor_id"])
umap_layer = st.number_input("Target layer to compare", 0, 200, 15, key="umap_layer")
payload = store.get_result(UMAP_KIND, umap_config(drafter_id, int(umap_layer), 1500))
if payload is None:
    st.info("The UMAP is not computed yet for this drafter and layer: press Compute UMAP (about a minute; "
            "cached in the store afterwards).")
    if st.button("Compute UMAP", key="drafter_umap", disabled=target is None):
        payload = run_job(lambda cb: representation_umap_job(store, target, drafter_id, int(umap_layer),
                                                             on_progress=cb))
if payload is not None:
    show_figure(umap_figure(payload), "umap")

train_section(store, target, expanded=False)
