"""Streamlit glue shared by app.py and pages/: cached resources, the model and dataset pickers.

Weights and the store are created once per process (``st.cache_resource``), never per rerun.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from cache.settings import get_settings
from cache.store import Store
from lenscope.figures.results import export_format, figure_bytes
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
    widget_key = f"{MODEL_KEY}_input"
    if widget_key not in st.session_state:  # widget state is dropped on pages without the picker
        st.session_state[widget_key] = st.session_state.get(MODEL_KEY, "")
    spec = st.sidebar.text_input(
        "Target model", key=widget_key, placeholder="embedded SmolLM2-135M-Instruct",
        help="Empty for the embedded SmolLM2-135M-Instruct; `embedded:gemma3-270m` for Gemma 3 270M; or a "
             "local checkpoint dir, a .gguf file, a hub id.",
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


def show_figure(fig, name: str, key: str | None = None, **kwargs) -> None:
    """Draw a plotly figure with a download button beside its own PNG camera: standalone HTML (plotly.js
    embedded, opens offline), or PNG where kaleido is installed. ``name`` is the file name and, without
    ``key``, the widget key."""
    key = key or name
    st.plotly_chart(fig, key=key, **kwargs)
    ext, mime = export_format()
    st.download_button(f"Download {ext.upper()}", data=lambda: figure_bytes(fig), file_name=f"{name}.{ext}",
                       mime=mime, key=f"download_{key}", on_click="ignore")


def head_settings() -> tuple[int, float]:
    """Sidebar layer and EGTP temperature of the heads."""
    layer = int(st.sidebar.number_input("Head layer", min_value=0, max_value=64, value=30))
    alpha = float(st.sidebar.number_input("EGTP alpha", min_value=0.05, max_value=100.0, value=1.0))
    return layer, alpha
