"""Drafter vs target page: live speculative decoding with the registered drafters, its stored measurement on
held-out prompts (acceptance per position, tau, speedup, OUTLETS vs SD-only) and one live generation with its
remaining-length curve."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.analysis.drafter.acceptance import DRAFT_STEPS
from lenscope.app.runner import failure_text, run_job
from lenscope.app.widgets import show_figure, show_table
from lenscope.figures.drafter import remaining_curves_figure
from lenscope.figures.drafter_live import (
    acceptance_ci_figure,
    acceptance_difference_table,
    live_tokens_html,
    speculative_table,
)
from lenscope.jobs.drafter.live import (
    answer_ended,
    live_generation,
    live_probes,
    registered_drafters,
    remaining_curve,
    speculative_job,
    stored_measurement,
)
from lenscope.jobs.runs.datasets import preferred_dataset
from lenscope.models.target import TargetModel
from lenscope.store.store import Store


def drafter_datasets(drafters: pd.DataFrame) -> list[str]:
    """Datasets with a registered OUTLETS drafter, the pages' preferred one first."""
    names = sorted({c["dataset"] for c in drafters["config"] if (c or {}).get("variant") == "outlets"})
    first = preferred_dataset(names)
    return ([first] if first else []) + [n for n in names if n != first]


def measurement_section(store: Store, target: TargetModel | None, dataset: str) -> None:
    """The stored live measurement on held-out prompts, or a button that makes it."""
    found = stored_measurement(store, dataset)
    payload = None if found is None else found[1]
    if payload is None:
        st.info(f"Not measured yet for the drafters of {dataset!r}: press the button (plain and speculative "
                "decoding of held-out prompts, a few minutes on CPU; stored afterwards), or run "
                f"`python -m lenscope speculative --dataset {dataset}`.")
        c1, c2 = st.columns(2)
        n_prompts = c1.slider("Held-out prompts", 4, 64, 16, key="spec_prompts")
        max_new = c2.slider("Tokens per answer", 16, 256, 64, key="spec_tokens")
        if st.button("Measure live speculative decoding", key="spec_measure", disabled=target is None):
            payload = run_job(lambda cb: speculative_job(store, target, dataset, n_prompts, max_new,
                                                         on_progress=cb))
        if payload is None:
            return
    show_measurement(payload, dataset)


def show_measurement(payload: dict, dataset: str) -> None:
    """A live measurement's table, acceptance per drafting step and the OUTLETS vs SD-only difference."""
    temperature = "greedy (T = 0)" if payload["temperature"] <= 0 else f"T = {payload['temperature']:g}"
    st.caption(f"{payload['prompts']} held-out prompts of {dataset!r}, {temperature}, k = {payload['k']} drafted "
               "tokens per verify pass; every number is from these live runs (the target verifies each draft), "
               "with a 95% bootstrap CI over prompts.")
    show_table(speculative_table(payload), f"speculative-decoding-{dataset}", hide_index=True)
    show_figure(acceptance_ci_figure(payload["drafters"]), f"live-acceptance-{dataset}")
    difference = acceptance_difference_table(payload["difference"])
    if difference.empty:
        st.caption("Train the SD-only drafter (`train-drafter --variant sd-only`) to test the paper's claim that "
                   "the length head costs no acceptance.")
    else:
        st.markdown("**The paper's claim: training the length head with the drafter costs no acceptance** "
                    "(OUTLETS vs SD-only, paired on the same prompts)")
        show_table(difference, f"acceptance-outlets-vs-sd-only-{dataset}", hide_index=True)


def live_section(store: Store, target: TargetModel | None, dataset: str, probes: pd.DataFrame) -> None:
    """One live speculative generation: tokens coloured by who wrote them, then the remaining-length curve of
    the drafter's length head (and a probe) against the truth."""
    drafters = registered_drafters(store, dataset)
    c1, c2, c3 = st.columns(3)
    variant = c1.selectbox("Drafter", list(drafters), key="live_variant")
    probes = live_probes(probes)
    probe_names = ["(none)"] + probes["name"].tolist()
    probe_name = c2.selectbox("Probe", probe_names, index=min(1, len(probe_names) - 1), key="live_probe")
    max_new = c3.slider("Max new tokens", 16, 512, 128, key="live_tokens")
    prompt = st.text_area("Prompt", placeholder="Ask something...", key="live_prompt")
    if st.button("Generate speculatively", key="live_generate", disabled=target is None or not prompt.strip()):
        probe_id = None if probe_name == "(none)" else int(probes.set_index("name").loc[probe_name, "predictor_id"])
        box, cycles = st.empty(), []
        try:
            for cycle in live_generation(store, target, int(drafters[variant]["predictor_id"]), prompt, max_new,
                                         DRAFT_STEPS, probe_id=probe_id):
                cycles.append(cycle)
                box.markdown(live_tokens_html(cycles), unsafe_allow_html=True)
        except ValueError as exc:
            st.error(failure_text(exc))
        st.session_state["live_cycles"] = cycles
    cycles = st.session_state.get("live_cycles")
    if cycles:
        if not st.session_state.get("live_generate"):
            st.markdown(live_tokens_html(cycles), unsafe_allow_html=True)
        drafted = [c for c in cycles if c.step >= 0]
        accepted = sum(len(c.accepted) for c in drafted)
        tokens = sum(c.new_tokens for c in cycles)
        st.caption(f"{tokens} tokens in {len(drafted)} verify passes: {accepted} "
                   "drafted tokens accepted; the output is the target's own (lossless).")
        curve = remaining_curve(cycles).dropna(axis=1, how="all")
        censored = not answer_ended(cycles)
        show_figure(remaining_curves_figure(curve, "Remaining length during this generation (estimated at every "
                                                   "verify pass)", censored), "live-remaining")
        if censored:
            st.caption(f"The answer hit the {tokens}-token cap before its end-of-turn "
                       "token: its true length is unknown, so the dashed line (tokens left to the cap) is only a "
                       "lower bound on the true remaining length. Raise Max new tokens to see the real end.")
