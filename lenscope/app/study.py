"""The starter study in the app: the button every empty state offers (a background job that survives a
reload), the home page's checklist, and the guided tour of the user's own numbers."""

from __future__ import annotations

import streamlit as st

from lenscope.analysis.core.verdicts import VERDICT_LEGEND
from lenscope.app.background import get_job, show_job, start_job
from lenscope.app.docs import docs_link
from lenscope.app.widgets import MODEL_KEY, get_target, number_card, show_table
from lenscope.jobs.results.claims import claims_display, holm_family
from lenscope.jobs.runs.datasets import dataset_counts, preferred_dataset
from lenscope.jobs.study.pipeline import (
    SHIPPED_SAMPLES,
    SIZES,
    collection_text,
    run_study,
    study_checklist,
    study_dataset,
    study_steps,
)
from lenscope.jobs.study.report import study_report
from lenscope.jobs.study.results import StoreResults, StudyResults, claims_table
from lenscope.jobs.study.shipped import ShippedStudy, shipped_for
from lenscope.jobs.study.tour import tour
from lenscope.models.target import TargetModel
from lenscope.store.settings import get_settings
from lenscope.store.store import Store

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


def shipped_option(study: ShippedStudy) -> str:
    """The dataset picker's entry for the shipped results."""
    return f"{study.dataset} (shipped results)"


def picked_shipped(store: Store, dataset: str | None) -> ShippedStudy | None:
    """The shipped study when ``dataset`` is its picker entry, else None (a dataset of the store)."""
    study = shipped_for(store)
    return study if study is not None and dataset == shipped_option(study) else None


def study_results(store: Store, dataset: str) -> StudyResults:
    """The results behind the picker's ``dataset``: the shipped files or the store's dataset."""
    return picked_shipped(store, dataset) or StoreResults(store, dataset)


def shipped_notice(store: Store, study: ShippedStudy) -> None:
    """What the shipped numbers are, and the starter study as the live demonstration."""
    st.info(study.label)
    with st.expander("Run the pipeline live on this machine (the starter study)"):
        st.caption("The shipped numbers come from the full study. The starter study is the live demonstration: it "
                   f"runs every step on your machine ({SIZE_TEXT.get(starter_size(), starter_size())}), fills "
                   f"dataset {starter_dataset()!r} and lets you inspect single runs; its few prompts are too few "
                   "to judge most claims.")
        starter_button(store, key="starter_shipped")


def dataset_picker(store: Store) -> str | None:
    """Sidebar choice of a dataset, opening on the one the URL names (``?dataset=NAME``), else the study's: the
    store's study, else the shipped study's results (:func:`picked_shipped`), else the starter; None (after the
    starter button) when there is none."""
    names = store.datasets_frame()["name"].tolist()
    shipped = shipped_for(store)
    options = ([shipped_option(shipped)] if shipped is not None else []) + names
    if not options:
        empty_state(store)
        return None
    requested = st.query_params.get("dataset")
    default = (requested if requested in options else shipped_option(shipped) if shipped is not None
               else preferred_dataset(names))
    name = st.sidebar.selectbox("Dataset", options, index=options.index(default))
    if shipped is not None and name == options[0]:
        st.sidebar.caption(f"{shipped.manifest['runs']:,} runs, shipped with lenscope (read-only)")
        return name
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


def report_button(results: StudyResults, key: str = "report") -> None:
    """Download a study's ``results`` as one offline HTML file (built when clicked)."""
    st.download_button("Download the study report (HTML)", key=key, on_click="ignore", mime="text/html",
                       data=lambda: study_report(results), file_name=f"lenscope-report-{results.dataset}.html",
                       help="Claims with CIs, the pooling ablation, PLP, attribution, drafters and the scheduler "
                            "preset in one file that opens offline (also `python -m lenscope report`).")


# A card's headline: the number on one line, its interval whole on the next (never cut: st.metric and headings
# end a value too wide for a fifth of the page with "...").
def guided_tour(results: StudyResults) -> None:
    """Five numbered cards, each with its number and its intervals named by their level (whole, below it) from a
    study's ``results``, what it rests on, the paper's counterpart and a link to its page."""
    columns = st.columns(5)
    for column, stop in zip(columns, tour(results)):
        with column.container(border=True):
            st.markdown(f"**{stop.title}**")
            number_card(stop.number, stop.interval)
            rests = f" Rests on {stop.rests_on}." if stop.rests_on else ""
            verdict = f" **{stop.verdict}**." if stop.verdict else ""
            st.caption(f"{stop.detail}.{verdict}{rests} {stop.paper}.")
            st.page_link(stop.page, label="Open the page")


def claims_section(results: StudyResults) -> None:
    """The papers' claims judged on a study's ``results``, with their CIs and verdicts."""
    table = claims_table(results)
    if table is None:
        st.info(f"The claims of {results.dataset!r} are not judged yet: the study's claims step "
                "(`python -m lenscope claims`).")
        return
    config = results.claims()["config"]
    show_table(claims_display(table), f"claims-{results.dataset}", hide_index=True, width="stretch")
    st.caption(f"Out-of-fold predictions of {config['folds']}-fold cross-validation grouped by conversation, "
               f"{config['seeds']} training seeds; MAE difference < 0: the claim holds. 95% CI: the plain paired "
               f"bootstrap CI; Holm-adjusted CI: each row's level in its cell, over the family of the table's "
               f"{holm_family(table)} judged rows (prompts and seeds resampled); the verdicts read the Holm-adjusted "
               f"CI. Verdicts: {VERDICT_LEGEND}.")
    docs_link("study/evaluation", "How the claims are judged")
