"""Streamlit glue shared by the EGTP pages: dataset/layer pickers and job progress bars."""

from __future__ import annotations

import streamlit as st

from cache.store import Store


def dataset_picker(store: Store) -> str | None:
    """Sidebar choice of a stored dataset; None (after saying how to create one) when there is none."""
    names = store.datasets_frame()["name"].tolist()
    if not names:
        st.info("No dataset in the store yet. Create one with `python -m lenscope collect --dataset dev "
                "--n 160 --max-new-tokens 256`.")
        return None
    default = names.index("dev") if "dev" in names else 0
    return st.sidebar.selectbox("Dataset", names, index=default)


def head_settings() -> tuple[int, float]:
    """Sidebar layer and EGTP temperature of the heads."""
    layer = int(st.sidebar.number_input("Head layer", min_value=0, max_value=64, value=30))
    alpha = float(st.sidebar.number_input("EGTP alpha", min_value=0.05, max_value=100.0, value=1.0))
    return layer, alpha


def progress_callback(bar):
    """``on_progress(done, total, label)`` for lenscope jobs, drawing into an ``st.progress`` bar."""
    def update(done: int, total: int, label: str) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=f"{label}: {done}/{total}")

    return update
