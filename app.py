"""lenscope: the sidebar's navigation (Home, then the pages of pages/ at their usual URLs) and the Home page: the
model and the store, the starter study (checklist and one button) and the guided tour."""

from pathlib import Path

import streamlit as st

from lenscope.app.docs import docs_link
from lenscope.app.runner import run_job
from lenscope.app.study import (
    checklist,
    claims_section,
    guided_tour,
    report_button,
    starter_button,
    starter_dataset,
)
from lenscope.app.widgets import dataset_name_input, get_store, model_picker, navigation, show_table
from lenscope.jobs.runs.collect import collect_sample
from lenscope.jobs.runs.datasets import preferred_dataset
from lenscope.jobs.runs.generate import GenerationSettings
from lenscope.jobs.study.results import StoreResults
from lenscope.jobs.study.shipped import shipped_for


def home() -> None:
    """The Home page (the app's root URL)."""
    st.title("lenscope")
    st.markdown("Why can a model's own internals predict **how long it will answer**? lenscope runs a target model "
                "live and tests two papers' claims on its answers: **EGTP** (ICLR 2026) and **OUTLETS** "
                "(arXiv 2609.01068).")
    docs_link("guide/home", "What each part of this page is")

    store = get_store()
    datasets = store.datasets_frame()
    predictors = store.predictors_frame()

    shipped = shipped_for(store)  # the shipped tour needs no model: it is on screen while the model loads below
    if shipped is not None:
        st.subheader(f"Guided tour: the {shipped.manifest['runs']:,}-run study (shipped results)")
        st.info(shipped.label)
        guided_tour(shipped)
        with st.expander("The papers' claims, judged on the study", expanded=True):
            claims_section(shipped)
        report_button(shipped, key="report_shipped")
    target = model_picker()

    left, right = st.columns(2)
    with left:
        st.subheader("Model")
        if target is None:
            st.warning("No model loaded: fix the model field in the sidebar.")
        else:
            st.markdown(f"`{target.source.spec}` · {target.num_layers} layers · hidden size {target.hidden_size} · "
                        f"context {target.context_length} · {target.dtype} on **{target.device.type}**")
    with right:
        st.subheader("Store")
        c1, c2, c3 = st.columns(3)
        c1.metric("Runs in datasets", int(datasets["runs"].sum()))
        c2.metric("Datasets", len(datasets))
        c3.metric("Trained predictors", len(predictors))
        st.caption(f"Database: `{store.engine.url.render_as_string(hide_password=True)}`")

    st.subheader(f"Starter study (dataset {starter_dataset()!r})")
    st.caption("One pipeline: collect, train every predictor, attribute, replay the scheduler and judge the claims; "
               "each step stored is skipped, and it runs in the background.")
    if target is not None:
        with st.expander("Steps", expanded=datasets.empty and shipped is None):
            checklist(store, target)
    starter_button(store, target)
    if target is not None:
        with st.expander("Collect a dataset of your own"):
            c1, c2, c3, c4 = st.columns(4)
            name = dataset_name_input(c1, "Dataset name", "mine", "collect_name")
            n = int(c2.number_input("Prompts", min_value=1, max_value=5000, value=40, key="collect_n"))
            humaneval = c3.slider("HumanEval share", 0.0, 1.0, 0.25, key="collect_humaneval")
            max_new = int(c4.number_input("Max new tokens", min_value=1, max_value=4096, value=1024,
                                          key="collect_max_new"))
            if name is not None and st.button("Collect", key="collect_button"):
                report = run_job(lambda on_progress: collect_sample(
                    store, target, name, n, {"sharegpt": 1 - humaneval, "humaneval": humaneval},
                    GenerationSettings(max_new_tokens=max_new), on_progress=on_progress), start="Loading prompts...")
                if report is not None:
                    st.success(f"{len(report.run_ids)} runs in {name!r}: {report.generated} generated "
                               f"({report.finished} ended with end-of-turn, {report.tokens_per_s:.0f} tokens/s), "
                               f"{report.cached} from the cache.")

    names = datasets["name"].tolist()
    if names:
        dataset = preferred_dataset(names)
        results = StoreResults(store, dataset)
        live = " (the live demonstration: too few prompts to judge most claims)" if shipped is not None else ""
        st.subheader(f"Guided tour: dataset {dataset!r}{live}")
        guided_tour(results)
        with st.expander(f"The papers' claims, judged on {dataset!r}"):
            claims_section(results)
        report_button(results)
        show_table(datasets[["name", "runs", "created"]], "datasets", hide_index=True, width="stretch")


st.set_page_config(page_title="lenscope", layout="wide")
navigation(home, Path(__file__).resolve().parent)
