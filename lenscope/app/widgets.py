"""Streamlit glue shared by app.py and pages/: cached resources, the model and dataset pickers, the sidebar's
navigation, and the one way figures and tables are shown (each with its downloads).

The store is created once per process (``st.cache_resource``); models live in the process's bounded
:class:`ModelPool`; neither is created per rerun. Every figure goes through :func:`show_figure` (PNG or SVG from the
chart's camera, standalone HTML from a button) and every table through :func:`show_table` (CSV and Parquet).
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import streamlit as st

from lenscope.app.model_access import browser_source
from lenscope.app.model_pool import ModelPool
from lenscope.app.runner import error_boundary, failure_text
from lenscope.models.target import TargetModel
from lenscope.store.names import DATASET_NAME_RULE, MAX_DATASET_NAME, dataset_problem
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


def dataset_name_input(column, label: str, default: str, key: str) -> str | None:
    """A text field for a new dataset's name; the name, or None after showing why it is no dataset name."""
    name = column.text_input(label, value=default, key=key, max_chars=MAX_DATASET_NAME,
                             help=f"A dataset name is {DATASET_NAME_RULE}.").strip() or default
    problem = dataset_problem(name)
    if problem:
        st.error(problem)
        return None
    return name


def navigation(home: Callable[[], None], root: Path) -> None:
    """The sidebar's navigation, run: "Home" (``home``, at the app's root URL) first, then every page of
    ``root/pages`` in file order at the URL and title its file name gives (``pages/1_Token_entropy.py``: "Token
    entropy" at ``/Token_entropy``, as Streamlit names a ``pages/`` folder's pages)."""
    pages = [st.Page(home, title="Home", icon=":material/home:", default=True)]
    pages += [st.Page(path) for path in sorted((root / "pages").glob("*.py"))]
    st.navigation(pages).run()


_NUMBER = ('<div class="tour-number" style="font-size:1.75rem;font-weight:600;line-height:1.25;'
           'overflow-wrap:anywhere">{}</div><div class="tour-interval" style="font-size:0.95rem;opacity:0.8;'
           'overflow-wrap:anywhere;min-height:1.4em">{}</div>')


def number_card(number: str, interval: str) -> None:
    """A headline number large with its interval whole on the line below (or an empty line): unlike
    ``st.metric``, nothing is cut short, however long the CI."""
    st.markdown(_NUMBER.format(html.escape(number), html.escape(interval) or "&nbsp;"), unsafe_allow_html=True)


def file_stem(name: str) -> str:
    """``name`` as a file name on any system: letters, digits, dots, dashes and underscores (``a:b`` -> ``a-b``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "lenscope"


IMAGE_FORMATS = ("PNG", "SVG")  # what the chart's camera saves (plotly.js draws it in the browser: no kaleido)


def figure_html(fig, name: str) -> bytes:
    """The figure as one HTML file that opens offline (plotly.js embedded); its camera saves ``name``.svg."""
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "svg", "filename": name}}
    return fig.to_html(include_plotlyjs=True, full_html=True, config=config).encode("utf-8")


@st.fragment
def _figure(fig, name: str, key: str, kwargs: dict) -> None:
    """The chart and its download row; a fragment, so picking the camera's format reruns only this (a figure shown
    after a button press stays)."""
    fmt = st.session_state.get(f"image_format_{key}") or IMAGE_FORMATS[0]
    config = {"displaylogo": False,
              "toImageButtonOptions": {"format": fmt.lower(), "filename": name, "scale": 2 if fmt == "PNG" else 1}}
    st.plotly_chart(fig, key=key, config=config, **kwargs)
    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
        st.download_button("HTML", data=lambda: figure_html(fig, name), file_name=f"{name}.html", mime="text/html",
                           key=f"download_{key}", on_click="ignore", icon=":material/download:", type="tertiary",
                           help="The interactive figure in one file that opens offline")
        st.segmented_control("Camera saves", IMAGE_FORMATS, default=IMAGE_FORMATS[0], key=f"image_format_{key}",
                             required=True, label_visibility="collapsed",
                             help="What the camera icon at the chart's top right (on hover) downloads: PNG or SVG")


def show_figure(fig, name: str, key: str | None = None, **kwargs) -> None:
    """Draw a plotly figure with its downloads: PNG or SVG from the chart's camera (drawn in the browser; the
    format picked beside it) and standalone HTML (plotly.js embedded, opens offline). ``name`` is the files' name
    and, without ``key``, the widget key; ``kwargs`` go to ``st.plotly_chart`` (e.g. ``width``)."""
    _figure(fig, file_stem(name), key or name, kwargs)


def _table_data(frame):
    """What a shown table holds: the frame itself, a Styler's data (a frame's ``.data`` may be a column)."""
    return frame if isinstance(frame, pd.DataFrame) else getattr(frame, "data", frame)


def _export_frame(frame, index: bool) -> pd.DataFrame:
    """A shown table as a plain frame for export: a Styler's data, its index a column when it carries meaning."""
    frame = pd.DataFrame(_table_data(frame))
    if isinstance(frame.columns, pd.MultiIndex):
        frame.columns = [" / ".join(map(str, c)) for c in frame.columns]
    return frame.reset_index() if index else frame


def table_csv(frame: pd.DataFrame) -> bytes:
    """The table as UTF-8 CSV."""
    return frame.to_csv(index=False).encode("utf-8")


def table_parquet(frame: pd.DataFrame) -> bytes:
    """The table as Parquet: column names as text; a column Arrow cannot type (mixed values, lists of several
    kinds) as text."""
    out = frame.rename(columns=str)
    try:
        buffer = io.BytesIO()
        out.to_parquet(buffer, index=False)
    except (TypeError, ValueError, NotImplementedError):  # pyarrow's ArrowInvalid / ArrowTypeError are ValueErrors
        buffer = io.BytesIO()
        mixed = [c for c in out.columns if out[c].dtype == object]
        out.astype({c: str for c in mixed}).to_parquet(buffer, index=False)
    return buffer.getvalue()


def download_table(frame, name: str, key: str | None = None, index: bool = False, what: str | None = None) -> None:
    """CSV and Parquet buttons for ``frame`` (built when clicked), files ``name``.csv / ``name``.parquet; ``index``:
    its index as the first column; ``what`` leads the buttons' labels ("every column (CSV)") for a table that is not
    the one shown above them."""
    key, name = key or name, file_stem(name)
    labels = [f"{what} ({kind})" if what else kind for kind in ("CSV", "Parquet")]
    with st.container(horizontal=True, gap="small"):
        st.download_button(labels[0], data=lambda: table_csv(_export_frame(frame, index)), file_name=f"{name}.csv",
                           mime="text/csv", key=f"csv_{key}", on_click="ignore", icon=":material/download:",
                           type="tertiary")
        st.download_button(labels[1], data=lambda: table_parquet(_export_frame(frame, index)),
                           file_name=f"{name}.parquet", mime="application/vnd.apache.parquet", key=f"parquet_{key}",
                           on_click="ignore", icon=":material/download:", type="tertiary")


def show_table(frame, name: str, key: str | None = None, **kwargs):
    """``st.dataframe(frame, **kwargs)`` with CSV and Parquet downloads of what it shows (the index too when it is
    shown and is not a plain row number); returns what ``st.dataframe`` returns (a selection with ``on_select``).
    ``name`` is the files' name and, without ``key``, the downloads' key (``key`` is also the table's)."""
    shown = st.dataframe(frame, key=key, **kwargs)
    index = not kwargs.get("hide_index") and not isinstance(getattr(_table_data(frame), "index", None), pd.RangeIndex)
    download_table(frame, name, key or name, index=index)
    return shown


def head_settings() -> tuple[int, float]:
    """Sidebar layer and EGTP temperature of the heads."""
    layer = int(st.sidebar.number_input("Head layer", min_value=0, max_value=64, value=30))
    alpha = float(st.sidebar.number_input("EGTP alpha", min_value=0.05, max_value=100.0, value=1.0))
    return layer, alpha
