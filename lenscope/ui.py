"""Streamlit glue shared by app.py and pages/: cached resources and the model picker.

Weights and the store are created once per process (``st.cache_resource``), never per rerun.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from cache.store import Store
from lenscope.settings import get_settings
from models.target import TargetModel

MODEL_KEY = "lenscope_model_spec"


@st.cache_resource(show_spinner=False)
def _store_at(db_url: str, tensor_dir: str) -> Store:
    return Store(db_url, Path(tensor_dir))


def get_store() -> Store:
    """The process-wide store for the current settings (SQLite file or ``LENSCOPE_DB_URL``)."""
    settings = get_settings()
    return _store_at(settings.db_url, str(settings.tensor_dir))


@st.cache_resource(show_spinner="Loading model weights (once per process)...")
def get_target(spec: str, device: str = "auto", dtype: str = "float32") -> TargetModel:
    """The process-wide target model for ``spec``."""
    return TargetModel.load(spec, device=device, dtype=dtype)


def model_picker() -> TargetModel | None:
    """Sidebar input for the target model; returns the loaded model or None after showing the error."""
    spec = st.sidebar.text_input(
        "Target model", value=st.session_state.get(MODEL_KEY, ""),
        placeholder="embedded SmolLM2-135M-Instruct",
        help="Empty for the embedded default; or a local checkpoint dir, a .gguf file, a hub id.",
    )
    st.session_state[MODEL_KEY] = spec
    try:
        target = get_target(spec.strip())
    except (ValueError, FileNotFoundError) as exc:
        st.sidebar.error(str(exc))
        return None
    st.sidebar.caption(f"{target.source.spec} · {target.num_layers} layers · d={target.hidden_size} · "
                       f"{target.device.type}")
    return target
