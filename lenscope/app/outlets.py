"""Drafter-vs-target widgets: the train form and the one-prompt remaining-length curves."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from cache.store import Store
from lenscope.app.runner import progress_callback, run_job
from lenscope.app.study import empty_state
from lenscope.app.widgets import show_figure
from lenscope.figures.outlets import remaining_curves_figure
from lenscope.jobs.outlets import DRAFTER_VARIANTS, PROBE_MODES, curves_job, train_drafter_job, train_probe_job
from lenscope.jobs.runs import GenerationSettings, generate_cached
from lenscope.jobs.study import preferred_dataset
from models.target import TargetModel


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


def curves_section(store: Store, target: TargetModel | None, drafters: pd.DataFrame, probes: pd.DataFrame) -> None:
    """Generate (or reuse) a run for a prompt and draw the drafter's and a probe's remaining-length curves."""
    drafter_name = st.selectbox("Drafter", drafters["name"].tolist(), key="curve_drafter")
    drafter_id = int(drafters.set_index("name").loc[drafter_name, "predictor_id"])
    probe_name = st.selectbox("Probe", ["(none)"] + probes["name"].tolist(), index=min(1, len(probes)),
                              key="curve_probe")
    probe_id = None if probe_name == "(none)" else int(probes.set_index("name").loc[probe_name, "predictor_id"])
    prompt = st.text_area("Prompt", placeholder="Ask something...", key="drafter_prompt")
    max_new = st.slider("Max new tokens", 8, 512, 128, key="drafter_max_new")
    if st.button("Generate", key="drafter_generate", disabled=target is None):
        bar = st.progress(0.0, text="generating")
        try:
            run, _ = generate_cached(store, target, prompt, GenerationSettings(max_new_tokens=max_new),
                                     on_progress=progress_callback(bar, "generating"))
            st.session_state["drafter_run_id"] = run.id
        except ValueError as exc:
            st.error(str(exc))
    run_id = st.session_state.get("drafter_run_id")
    curve_key = ("drafter_curves", run_id, drafter_id, probe_id)
    if run_id is not None and target is not None and curve_key not in st.session_state:
        try:
            st.session_state[curve_key] = curves_job(store, target, run_id, drafter_id, probe_id)
        except ValueError as exc:
            st.error(str(exc))
    if curve_key in st.session_state:
        curves, warning = st.session_state[curve_key]
        if warning:
            st.warning(warning)
        show_figure(remaining_curves_figure(curves), "remaining-curves")
        st.caption(f"Run {run_id}: {len(curves)} generated tokens.")
