"""Streamlit glue shared by app.py and pages/: cached resources, the model and dataset pickers.

The store is created once per process (``st.cache_resource``); models live in the process's bounded
:class:`ModelPool`; neither is created per rerun.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from lenscope.app.model_access import browser_source
from lenscope.app.model_pool import ModelPool
from lenscope.app.runner import error_boundary, failure_text
from lenscope.figures.results import export_format, figure_bytes
from lenscope.models.target import TargetModel
from lenscope.store.settings import get_settings
from lenscope.store.store import Store

MODEL_KEY = "lenscope_model_spec"


@st.cache_resource(show_spinner=False)
def _store_at(db_url: str, tensor_dir: str) -> Store:
    return Store(db_url, Path(tensor_dir))


def get_store() -> Store:
    """The process-wide store for the current settings (SQLite file or ``LENSCOPE_DB_URL``)."""
    with error_boundary():  # an unreachable, read-only or foreign database: its message, and the page stops
        settings = get_settings()
        return _store_at(settings.db_url, str(settings.tensor_dir))


@st.cache_resource(show_spinner=False)
def _models() -> ModelPool[TargetModel]:
    settings = get_settings()
    return ModelPool(settings.model_pool_models, settings.model_pool_bytes, lambda target: target.nbytes)


def get_target(spec: str, device: str = "auto", dtype: str = "float32") -> TargetModel:
    """The process-wide target model for ``spec``, if the browser may load it (:func:`browser_source`); kept
    among the most recently used models, and a failed load is not retried for a few minutes."""
    source = browser_source(spec, get_settings().allowed_model_roots)

    def load() -> TargetModel:
        with st.spinner("Loading model weights (kept for the next reruns)..."):
            return TargetModel.load(source, device=device, dtype=dtype)

    return _models().get((source, device, dtype), load)


def model_picker() -> TargetModel | None:
    """Sidebar input for the target model; returns the loaded model or None after showing the error."""
    widget_key = f"{MODEL_KEY}_input"
    if widget_key not in st.session_state:  # widget state is dropped on pages without the picker
        st.session_state[widget_key] = st.session_state.get(MODEL_KEY, "")
    spec = st.sidebar.text_input(
        "Target model", key=widget_key, placeholder="embedded SmolLM2-135M-Instruct",
        help="Empty for the embedded SmolLM2-135M-Instruct; `embedded:gemma3-270m` for Gemma 3 270M; or a "
             "local checkpoint dir or .gguf file under the allowed roots (LENSCOPE_ALLOWED_MODEL_ROOTS); or a hub "
             "id (`make run` starts offline: hub models already in the local cache).",
    )
    st.session_state[MODEL_KEY] = spec
    try:
        target = get_target(spec.strip())
    except Exception as exc:  # noqa: BLE001 - the sidebar says why; the page goes on without a model
        st.sidebar.error(failure_text(exc))
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
