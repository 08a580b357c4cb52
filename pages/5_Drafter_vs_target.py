"""Drafter vs target: the OUTLETS drafter's length head against a TRAIL-style MLP probe on target states."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from analysis.probes import LengthProbe
from lenscope import ui
from lenscope.drafter_jobs import (
    UMAP_KIND, load_drafter, representation_umap_job, run_curves, train_drafter_job, train_probe_job, umap_config,
)
from lenscope.figures.drafter import (
    ablation_table, acceptance_figure, mae_by_step_figure, remaining_curves_figure, umap_figure,
)
from lenscope.runs import generate_cached
from models.engine import GenerationSettings

VARIANTS = ["outlets", "lp-only", "sd-only", "no-decoder", "classification", "no-gate"]

st.set_page_config(page_title="Drafter vs target · lenscope", layout="wide")
st.title("Drafter vs target")
st.caption("OUTLETS: a speculative drafter (EAGLE-3 style) with a length head, compared with an MLP probe "
           "on one target layer. Remaining length is predicted after prefill (static) and at every step.")
store = ui.get_store()
target = ui.model_picker()


def progress_callback(bar):
    def update(done: int, total: int, label: str) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=f"{label}: {done}/{total}")
    return update


def train_section(expanded: bool) -> None:
    with st.expander("Train a drafter or a probe", expanded=expanded):
        datasets = store.datasets_frame()
        if datasets.empty:
            st.warning("No dataset collected yet: run `python -m lenscope collect --dataset dev`.")
            return
        dataset = st.selectbox("Dataset", datasets["name"].tolist(), key="train_dataset")
        left, right = st.columns(2)
        variant = left.selectbox("Drafter variant", VARIANTS, key="train_variant")
        epochs = left.number_input("Epochs", 1, 50, 6, key="train_epochs")
        layer = right.number_input("Probe layer", 0, 200, 15, key="train_layer")
        mode = right.selectbox("Probe head", ["regression", "classification"], key="train_mode")
        jobs = {"drafter": lambda cb: train_drafter_job(store, target, dataset, variant, int(epochs), on_progress=cb),
                "probe": lambda cb: train_probe_job(store, dataset, int(layer), mode, on_progress=cb)}
        clicked = [name for name, col in (("drafter", left), ("probe", right))
                   if col.button(f"Train {name}", key=f"train_{name}", disabled=name == "drafter" and target is None)]
        for name in clicked:
            bar = st.progress(0.0, text="starting")
            try:
                result = jobs[name](progress_callback(bar))
            except ValueError as exc:
                st.error(str(exc))
                continue
            st.success(f"Registered {result.name}; rerun the page to see it.")


drafters = store.predictors_frame("drafter")
probes = store.predictors_frame("probe")
if drafters.empty:
    st.info("No drafter trained yet. Run `python -m lenscope train-drafter --dataset dev` and "
            "`python -m lenscope train-probe --dataset dev`, or use the Train section below.")
    train_section(expanded=True)
    st.stop()

predictors = pd.concat([drafters, probes], ignore_index=True)
st.subheader("Ablations")
st.dataframe(ablation_table(predictors), hide_index=True)

names = predictors["name"].tolist()
st.subheader("Dataset-wide MAE by decoding step")
default = [n for n in names if n.endswith(":outlets")][:1] + probes["name"].tolist()[:1]
chosen = st.multiselect("Predictors", names, default=default or names[:1], key="mae_predictors")
split = st.radio("Runs", ["evaluation split", "all splits"], horizontal=True, key="mae_split")
max_step = st.slider("Up to step", 0, 256, 128, key="mae_max_step")
frames = {}
for name in chosen:
    row = predictors[predictors["name"] == name].iloc[0]
    frame = store.predictions_frame(int(row["predictor_id"]))
    if split == "evaluation split":
        frame = frame[frame["split"] == (row["metrics"] or {}).get("eval_split", "test")]
    frames[name] = frame
if frames:
    st.plotly_chart(mae_by_step_figure(frames, max_step))

rates = {row.name: row.metrics["acceptance"] for row in drafters.itertuples() if (row.metrics or {}).get("acceptance")}
if rates:
    st.subheader("Speculative acceptance")
    st.plotly_chart(acceptance_figure(rates))
    st.caption("Greedy drafts of k tokens verified against the target's greedy choice on the stored sequences "
               "(steps whose greedy token is not derivable from the stored path are left out).")

st.subheader("One prompt: remaining-length curves")
drafter_name = st.selectbox("Drafter", drafters["name"].tolist(), key="curve_drafter")
drafter_row = drafters[drafters["name"] == drafter_name].iloc[0]
probe_name = st.selectbox("Probe", ["(none)"] + probes["name"].tolist(), index=min(1, len(probes)), key="curve_probe")
prompt = st.text_area("Prompt", placeholder="Ask something...", key="drafter_prompt")
max_new = st.slider("Max new tokens", 8, 512, 128, key="drafter_max_new")
if st.button("Generate", key="drafter_generate", disabled=target is None):
    bar = st.progress(0.0, text="generating")
    try:
        run, _ = generate_cached(store, target, prompt, GenerationSettings(max_new_tokens=max_new),
                                 on_token=lambda step, total: bar.progress(step / total, text=f"token {step}/{total}"))
        st.session_state["drafter_run_id"] = run.id
    except ValueError as exc:
        st.error(str(exc))
run_id = st.session_state.get("drafter_run_id")
curve_key = ("drafter_curves", run_id, int(drafter_row["predictor_id"]), probe_name)
if run_id is not None and target is not None and curve_key not in st.session_state:
    run = store.load_run(run_id)
    probe = None
    if probe_name != "(none)":
        probe = LengthProbe.load(probes[probes["name"] == probe_name].iloc[0]["artifact_path"])
        if probe.config.layer not in run.features.hidden:
            st.warning(f"This run has no stored layer {probe.config.layer}; the probe is left out.")
            probe = None
    try:
        st.session_state[curve_key] = run_curves(run, load_drafter(drafter_row["artifact_path"], target), probe)
    except ValueError as exc:
        st.error(str(exc))
if curve_key in st.session_state:
    curves = st.session_state[curve_key]
    st.plotly_chart(remaining_curves_figure(curves))
    st.caption(f"Run {run_id}: {len(curves)} generated tokens.")

st.subheader("UMAP of representations")
umap_layer = st.number_input("Target layer to compare", 0, 200, 15, key="umap_layer")
config = umap_config(int(drafter_row["predictor_id"]), int(umap_layer), 1500)
payload = store.get_result(UMAP_KIND, config)
if payload is None:
    st.info("The UMAP is not computed yet for this drafter and layer: press Compute UMAP (about a minute; cached in the store afterwards).")
    if st.button("Compute UMAP", key="drafter_umap", disabled=target is None):
        bar = st.progress(0.0, text="starting")
        payload = representation_umap_job(store, target, int(drafter_row["predictor_id"]), int(umap_layer),
                                          on_progress=progress_callback(bar))
if payload is not None:
    st.plotly_chart(umap_figure(payload))

train_section(expanded=False)
