"""Drafter vs target: the OUTLETS drafter's length head against a TRAIL-style MLP probe on target states."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.app.docs import docs_link
from lenscope.app.drafter_live import drafter_datasets, live_section, measurement_section
from lenscope.app.drafter_training import shipped_section, train_section
from lenscope.app.runner import run_job
from lenscope.app.widgets import get_store, model_picker, show_figure, show_table
from lenscope.figures.drafter import (
    ablation_table,
    drafter_ablation_tables,
    mae_by_step_figure,
    paired_comparison_table,
    umap_figure,
)
from lenscope.jobs.drafter.ablation import drafter_ablation, stored_ablation
from lenscope.jobs.drafter.training import representation_umap_job, step_predictions, stored_umap
from lenscope.jobs.results.leaderboard import compare_predictors
from lenscope.jobs.study.shipped import shipped_for

st.set_page_config(page_title="Drafter vs target · lenscope", layout="wide")
st.title("Drafter vs target")
st.caption("OUTLETS: a speculative drafter whose length head predicts the remaining length with its drafts, "
           "against an MLP probe on the target's states.")
docs_link("guide/drafter-vs-target")
store = get_store()
target = model_picker()

shipped = shipped_for(store)
if shipped is not None:
    shipped_section(store, shipped)
    st.header("Your store")

drafters = store.predictors_frame("drafter")
probes = store.predictors_frame("probe")
if drafters.empty:
    st.info("No drafter trained yet: the starter study trains the OUTLETS drafter, its ablations and a target "
            "probe; or train one in the section below (or `python -m lenscope train-drafter`).")
    train_section(store, target, expanded=True)
    st.stop()

predictors = pd.concat([drafters, probes], ignore_index=True)
datasets = drafter_datasets(drafters)
if datasets:
    st.subheader("Speculative decoding, live")
    dataset = st.selectbox("Drafters of dataset", datasets, key="spec_dataset")
    measurement_section(store, target, dataset)
    st.markdown("**One live generation** (the drafter proposes, the target verifies; the length head updates "
                "the remaining length at every verify pass)")
    live_section(store, target, dataset, probes)

st.subheader("Remaining length: drafter vs probes")
show_table(ablation_table(predictors), "drafters-vs-probes", hide_index=True)
if not probes.empty:
    st.markdown("**Drafter vs probe, paired on the same test runs**")
    c1, c2 = st.columns(2)
    first = c1.selectbox("Drafter", drafters["name"].tolist(), key="pair_drafter")
    second = c2.selectbox("Probe", probes["name"].tolist(), key="pair_probe")
    ids = predictors.set_index("name")["predictor_id"]
    show_table(paired_comparison_table(compare_predictors(store, int(ids[first]), int(ids[second]))),
               f"paired-{first}-vs-{second}", key="paired_drafter_probe", hide_index=True)

if datasets:
    st.subheader("Which part of the gain: the draft decoder, its objective or its inputs?")
    st.caption("The drafter variants (OUTLETS, no decoder, LP-only) beside MLP probes that see what the drafter "
               "sees: the best single layer (chosen on validation), the fused layers, and the fused or last layer "
               "pooled over every position the drafter attends over; epochs chosen on validation. Paired MAE "
               "differences over the test split's steps 0-32 with bootstrap CIs over prompts; one training seed "
               "each. A positive share is what that part earns.")
    ablation_dataset = st.selectbox("Dataset", datasets, key="ablation_dataset")
    ablation = stored_ablation(store, ablation_dataset)
    if ablation is None:
        st.info(f"Not measured yet for {ablation_dataset!r}: `python -m lenscope drafter-ablation --dataset "
                f"{ablation_dataset}` (trains the probes; the study runs it after the drafter variants).")
        if st.button("Run the drafter ablation (trains the probes)", key="drafter_ablation", disabled=target is None):
            ablation = run_job(lambda cb: drafter_ablation(store, ablation_dataset, target.num_layers,
                                                           on_progress=cb))
    if ablation is not None:
        maes, pairs = drafter_ablation_tables(ablation)
        show_table(maes, f"drafter-ablation-mae-{ablation_dataset}", hide_index=True)
        show_table(pairs, f"drafter-ablation-paired-{ablation_dataset}", hide_index=True)

names = predictors["name"].tolist()
st.markdown("**Dataset-wide MAE by decoding step**")
default = [n for n in names if n.endswith(":outlets")][:1] + probes["name"].tolist()[:1]
chosen = st.multiselect("Predictors", names, default=default or names[:1], key="mae_predictors")
split = st.radio("Runs", ["evaluation split", "all splits"], horizontal=True, key="mae_split")
max_step = st.slider("Up to step", 0, 256, 128, key="mae_max_step")
if chosen:
    frames = step_predictions(store, predictors, chosen, evaluation_only=split == "evaluation split")
    show_figure(mae_by_step_figure(frames, max_step), "mae-by-step")

st.subheader("UMAP of representations")
drafter_name = st.selectbox("Drafter", drafters["name"].tolist(), key="umap_drafter")
drafter_id = int(drafters.set_index("name").loc[drafter_name, "predictor_id"])
umap_layer = st.number_input("Target layer to compare", 0, 200, 15, key="umap_layer")
payload = stored_umap(store, drafter_id, int(umap_layer), 1500)
if payload is None:
    st.info("The UMAP is not computed yet for this drafter and layer: press Compute UMAP (about a minute; "
            "cached in the store afterwards).")
    if st.button("Compute UMAP", key="drafter_umap", disabled=target is None):
        payload = run_job(lambda cb: representation_umap_job(store, target, drafter_id, int(umap_layer),
                                                             on_progress=cb))
if payload is not None:
    show_figure(umap_figure(payload), "umap")

train_section(store, target, expanded=False)
