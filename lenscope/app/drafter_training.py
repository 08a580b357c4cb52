"""Drafter-vs-target widgets: the form that trains a drafter variant or a probe."""

from __future__ import annotations

import streamlit as st

from lenscope.app.drafter_live import show_measurement
from lenscope.app.runner import run_job
from lenscope.app.study import empty_state, shipped_notice
from lenscope.app.widgets import show_table
from lenscope.figures.drafter import ablation_table, drafter_ablation_tables
from lenscope.jobs.drafter.training import DRAFTER_VARIANTS, PROBE_MODES, train_drafter_job, train_probe_job
from lenscope.jobs.runs.datasets import preferred_dataset
from lenscope.jobs.study.shipped import ShippedStudy
from lenscope.models.target import TargetModel
from lenscope.store.store import Store


def train_section(store: Store, target: TargetModel | None, expanded: bool) -> None:
    """A form that trains a drafter variant or a probe on a stored dataset and registers it."""
    with st.expander("Train a drafter or a probe", expanded=expanded):
        datasets = store.datasets_frame()
        if datasets.empty:
            empty_state(store)
            return
        names = datasets["name"].tolist()
        dataset = st.selectbox("Dataset", names, index=names.index(preferred_dataset(names)), key="train_dataset")
        left, right = st.columns(2)
        variant = left.selectbox("Drafter variant", DRAFTER_VARIANTS, key="train_variant")
        epochs = left.number_input("Epochs", 1, 50, 6, key="train_epochs")
        layer = right.number_input("Probe layer", 0, 200, 15, key="train_layer")
        mode = right.selectbox("Probe head", PROBE_MODES, key="train_mode")
        jobs = {"drafter": lambda cb: train_drafter_job(store, target, dataset, variant, int(epochs), on_progress=cb),
                "probe": lambda cb: train_probe_job(store, dataset, int(layer), mode, on_progress=cb)}
        clicked = [name for name, col in (("drafter", left), ("probe", right))
                   if col.button(f"Train {name}", key=f"train_{name}", disabled=name == "drafter" and target is None)]
        for name in clicked:
            result = run_job(jobs[name])
            if result is not None:
                st.success(f"Registered {result.name}; rerun the page to see it.")


def shipped_section(store: Store, shipped: ShippedStudy) -> None:
    """The shipped study's drafter results: live speculative decoding, drafters vs probes, the drafter ablation."""
    st.header("The study (shipped results)")
    shipped_notice(store, shipped)
    found = shipped.speculative()
    if found is not None:
        st.subheader("Speculative decoding, measured live on held-out prompts")
        show_measurement(found[1], shipped.dataset)
    own = shipped.predictors()
    own = own[own["kind"].isin(["drafter", "probe"])]
    if not own.empty:
        st.subheader("Remaining length: drafter vs probes")
        show_table(ablation_table(own), f"drafters-vs-probes-{shipped.dataset}", hide_index=True)
    ablation = shipped.drafter_ablation()
    if ablation is not None:
        st.subheader("Which part of the gain: the draft decoder, its objective or its inputs?")
        maes, pairs = drafter_ablation_tables(ablation)
        show_table(maes, f"drafter-ablation-mae-{shipped.dataset}", hide_index=True)
        show_table(pairs, f"drafter-ablation-paired-{shipped.dataset}", hide_index=True)
