"""The evidence test's view on the Attribution page: verdict, table, scatter and one prompt's bars."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.app.widgets import download_table, number_card, show_figure, show_table
from lenscope.figures.attribution import (
    MEASURE_LABELS,
    evidence_display,
    evidence_scatter,
    evidence_token_bars,
    head_summary_display,
)
from lenscope.jobs.egtp.attribution import stored_evidence
from lenscope.store.store import Store


@st.cache_data(show_spinner=False, max_entries=4)
def _stored(_store: Store, dataset: str, layer: int, signature: tuple) -> tuple[dict, dict] | None:
    """:func:`stored_evidence`, read again only when the store changes (its payloads are megabytes)."""
    return stored_evidence(_store, dataset, layer)


def show_evidence(store: Store, dataset: str, layer: int) -> None:
    """The stored evidence of ``dataset`` at ``layer``, or what to run to get it."""
    found = _stored(store, dataset, layer, store.signature())
    if found is None:
        st.info(f"No evidence for dataset {dataset!r} at layer {layer} yet: click the button above or run "
                f"`python -m lenscope train-egtp --dataset {dataset} --layer {layer}` then "
                f"`python -m lenscope attribution --dataset {dataset} --layer {layer} --evidence`.")
    else:
        show_evidence_payload(*found, f"{dataset}-L{layer}")


def show_evidence_payload(settings: dict, evidence: dict, name: str) -> None:
    """An evidence result (its settings and payload): verdicts, tables, scatter and one prompt's bars; ``name``
    labels its downloads."""
    runs, rows = evidence["runs"], pd.DataFrame(evidence["table"])
    raw = rows[(rows["measure"] == "gradient") & (rows["control"] == "raw")].drop_duplicates("head")
    cards = st.columns(len(raw) + 1)
    for column, row in zip(cards, raw.itertuples()):
        with column.container(border=True):
            st.markdown(f"**{row.head}**{' (by construction)' if row.by_construction else ''}: raw r")
            number_card(f"{row.pearson:.3f}", f"95% CI [{row.pearson_lo:.3f}, {row.pearson_hi:.3f}]")
    with cards[-1].container(border=True):
        st.markdown("**EGTP paper**: Pearson r")
        number_card(f"{evidence['paper_pearson']:.3f}", "")
    st.info("**Verdicts** (raw r, like for like with the paper's; then within runs):\n\n"
            + "\n\n".join(f"- {text}." for text in evidence["verdicts"].values()))
    st.success(f"**{evidence['positive_control']}.**")
    epochs = ", ".join(f"{head}: epoch {epoch}" for head, epoch in evidence["best_epochs"].items())
    st.caption(f"Layer {evidence['layer']}, importances at each head's input. Attention heads trained up to "
               f"{settings['epochs']} epochs on {runs['train']} runs, the epoch chosen on {runs['val']} "
               f"({epochs}); "
               f"every number over the {runs['test']} test runs; {settings['n_boot']} bootstrap resamples, "
               f"{settings['n_perm']} within-run permutations (the smallest p they can give is "
               f"{1 / (settings['n_perm'] + 1):.3f}); under 50 test prompts nothing is judged; censored runs "
               f"{'included' if settings['include_censored'] else 'excluded'}.")
    st.markdown("**The heads on the test runs**: does a learned head predict better than mean pooling, and "
                "how far from uniform are its weights?")
    show_table(head_summary_display(evidence["heads"]), f"attribution-heads-{name}", hide_index=True)
    show_table(evidence_display(evidence["table"], evidence["paper_pearson"]), f"attribution-evidence-{name}",
               hide_index=True)
    download_table(rows, f"attribution-evidence-{name}-all-columns", what="Every column")
    left, right = st.columns(2)
    heads = rows.sort_values("by_construction", kind="stable")["head"]  # the by-construction head last
    head = left.selectbox("Head", list(dict.fromkeys(heads)), key="evidence_head")
    measures = list(dict.fromkeys(rows.loc[rows["head"] == head, "measure"]))
    measure = right.selectbox("Measure", measures, format_func=lambda m: MEASURE_LABELS.get(m, m),
                              key="evidence_measure")
    picked = rows[(rows["head"] == head) & (rows["measure"] == measure)].set_index("control")
    if "run-normalised" in picked.index:
        null = picked.loc["permutation null"].to_dict() if "permutation null" in picked.index else None
        show_figure(evidence_scatter(evidence["test_tokens"], head, measure,
                                     picked.loc["run-normalised"].to_dict(), null, evidence["paper_pearson"]),
                    f"evidence-scatter-{name}", key="evidence_scatter")
    else:
        st.warning(f"{head}: {measure} does not vary within runs, so the test does not apply to it.")
    records = evidence["test_tokens"]
    record = st.selectbox("Test prompt", records, key="evidence_run",
                          format_func=lambda r: f"run {r['run_id']}: {''.join(r['tokens'])[:80]!r} "
                                                f"({r['output_length']:.0f} answer tokens)")
    show_figure(evidence_token_bars(record, head), f"evidence-tokens-run-{record['run_id']}",
                key="evidence_tokens")
