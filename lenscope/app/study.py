"""The starter study in the app: the button every empty state offers (a background job that survives a
reload), the home page's checklist, and the guided tour of the user's own numbers."""

from __future__ import annotations

import streamlit as st

from cache.settings import get_settings
from cache.store import Store
from lenscope.app.background import get_job, show_job, start_job
from lenscope.app.widgets import MODEL_KEY, get_target
from lenscope.jobs.datasets import dataset_counts
from lenscope.jobs.report import study_report
from lenscope.jobs.study import (
    SHIPPED_SAMPLES,
    SIZES,
    collection_text,
    preferred_dataset,
    run_study,
    study_checklist,
    study_dataset,
    study_layers,
    study_steps,
)
from lenscope.jobs.tour import tour
from models.target import TargetModel

STARTER_JOB = "starter-study"
SIZE_TEXT = {"tiny": f"a test-sized study ({collection_text(SIZES['tiny'])})",
             "starter": f"{SHIPPED_SAMPLES['starter'].text()}, their features recomputed on the embedded model "
                        "(another model samples its own answers instead: "
                        f"{collection_text(SIZES['starter'])}); then every predictor, attribution, the scheduler "
                        "preset and the claims",
             "full": "the >= 2,000-run study (hours on 2 CPU cores; its generations ship with the app)"}


def starter_size() -> str:
    return get_settings().starter_size


def starter_dataset() -> str:
    return study_dataset(starter_size())


def _start(store: Store, target: TargetModel | None) -> None:
    if target is None:  # pages without a model picker load the sidebar's model (or the embedded one) now
        target = get_target(st.session_state.get(MODEL_KEY, "").strip())
    size = starter_size()
    start_job(STARTER_JOB, lambda on_progress: run_study(store, target, study_dataset(size), size, on_progress))


def starter_button(store: Store, target: TargetModel | None = None, key: str = "starter") -> None:
    """'Run the starter study' (what it contains in its help), or the running study's live progress."""
    job = get_job(STARTER_JOB)
    if job is None or not job.running:
        size = starter_size()
        if size not in SIZES:
            st.error(f"LENSCOPE_STARTER_SIZE must be one of {sorted(SIZES)}, not {size!r}")
            return
        if st.button("Run the starter study", type="primary", key=key, help=SIZE_TEXT[size]):
            try:
                _start(store, target)
            except (ValueError, FileNotFoundError) as exc:
                st.error(str(exc))
                return
            st.rerun()
    show_job(STARTER_JOB)


def empty_state(store: Store, what: str = "No dataset in the store yet.") -> None:
    """What every page shows before there is data: the starter button, with what it runs."""
    st.info(f"{what} Run the starter study: {SIZE_TEXT.get(starter_size(), starter_size())}. It keeps running "
            f"if you reload or leave the page, and fills dataset {starter_dataset()!r}.")
    starter_button(store, key=f"starter_{what}")


def dataset_picker(store: Store) -> str | None:
    """Sidebar choice of a stored dataset, opening on the one the URL names (``?dataset=NAME``), else the
    study's; None (after the starter button) when there is none."""
    names = store.datasets_frame()["name"].tolist()
    if not names:
        empty_state(store)
        return None
    requested = st.query_params.get("dataset")
    default = requested if requested in names else preferred_dataset(names)
    name = st.sidebar.selectbox("Dataset", names, index=names.index(default))
    try:
        st.sidebar.caption(dataset_counts(store, name).caption())
    except ValueError as exc:  # a dataset whose collection stored nothing yet
        st.sidebar.caption(str(exc))
    return name


@st.cache_data(show_spinner="Checking the study's steps...", max_entries=8)
def _checklist(_store: Store, _target: TargetModel, dataset: str, size: str, signature: tuple) -> list:
    return study_checklist(_store, _target, dataset, size)


def checklist(store: Store, target: TargetModel) -> None:
    """Each step of the starter study: done, running or to do."""
    size, dataset = starter_size(), starter_dataset()
    job = get_job(STARTER_JOB)
    if job is not None and job.running:
        names = [step.name for step in study_steps(store, target, dataset, size)]
        current = int(job.label.split("/")[0].removeprefix("step ")) if job.label.startswith("step ") else 0
        rows = [(name, "done" if i < current else "running" if i == current else "to do")
                for i, name in enumerate(names, start=1)]
    else:
        rows = [(name, "done" if done else "to do")
                for name, done in _checklist(store, target, dataset, size, store.signature())]
    icons = {"done": "✅", "running": "⏳", "to do": "▫️"}
    st.markdown("\n".join(f"{k}. {icons[status]} {name} — *{status}*" for k, (name, status) in
                          enumerate(rows, start=1)))


def report_button(store: Store, dataset: str, key: str = "report") -> None:
    """Download the study of ``dataset`` as one offline HTML file (built when clicked)."""
    st.download_button("Download the study report (HTML)", key=key, on_click="ignore", mime="text/html",
                       data=lambda: study_report(store, dataset, *study_layers(store, dataset)),
                       file_name=f"lenscope-report-{dataset}.html",
                       help="Claims with CIs, the pooling ablation, PLP, attribution, drafters and the scheduler "
                            "preset in one file that opens offline (also `python -m lenscope report`).")


def guided_tour(store: Store, dataset: str, layer: int) -> None:
    """Five numbered cards, each with its number from ``dataset`` and a link to its page."""
    columns = st.columns(5)
    for column, stop in zip(columns, tour(store, dataset, layer)):
        with column.container(border=True):
            st.markdown(f"**{stop.title}**")
            st.metric(stop.title, stop.value or "—", label_visibility="collapsed")
            st.caption(f"{stop.detail}. {stop.paper}.")
            st.page_link(stop.page, label="Open the page")
