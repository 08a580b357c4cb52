"""Every table downloads as CSV and Parquet and every figure as PNG / SVG (the chart's camera) and HTML, through
the one helper of lenscope/app/widgets.py; the sidebar's navigation opens on Home and keeps the pages' addresses."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest

from lenscope.app import widgets
from tests.apptest import REPO, open_page


def test_tables_export_as_csv_and_parquet_with_a_meaningful_index():
    pivot = pd.DataFrame({"chat": [1.5, 2.0], "code": [3.0, None]}, index=pd.Index(["egtp", "mean"], name="pooling"))
    shown = widgets._export_frame(pivot, index=True)
    assert shown.columns.tolist() == ["pooling", "chat", "code"]
    assert widgets.table_csv(shown).decode().splitlines() == ["pooling,chat,code", "egtp,1.5,3.0", "mean,2.0,"]
    back = pd.read_parquet(io.BytesIO(widgets.table_parquet(shown)))
    pd.testing.assert_frame_equal(back, shown)
    mixed = pd.DataFrame({0: [1, "a"], "tuples": [(1, 2), "x"]})  # what Arrow cannot type: written as text
    assert pd.read_parquet(io.BytesIO(widgets.table_parquet(mixed))).to_dict("list") == {
        "0": ["1", "a"], "tuples": ["(1, 2)", "x"]}
    nested = pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("mae", "all"), ("mae", "chat")]))
    assert widgets._export_frame(nested, index=False).columns.tolist() == ["mae / all", "mae / chat"]
    assert widgets.file_stem("predictions-a:b c/d") == "predictions-a-b-c-d" and widgets.file_stem("::") == "lenscope"


def test_figure_html_opens_offline_and_its_camera_saves_svg():
    page = widgets.figure_html(go.Figure(go.Bar(x=[1], y=[2])), "mae").decode()
    assert "<html>" in page[:100] and "plotly.js v" in page  # plotly.js embedded: no network needed
    assert '"toImageButtonOptions": {"format": "svg", "filename": "mae"}' in page


def test_navigation_lists_home_first_then_the_pages_at_their_addresses(monkeypatch):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    listed = []
    real = st.navigation

    def spy(pages, *args, **kwargs):
        listed.extend((p.title, p.url_path) for p in pages)
        return real(pages, *args, **kwargs)

    monkeypatch.setattr(st, "navigation", spy)
    script = f"""
from pathlib import Path
import streamlit as st
from lenscope.app.widgets import navigation

def home():
    st.title("the home page")

navigation(home, Path({str(REPO)!r}))
"""
    at = AppTest.from_string(script).run()
    assert not at.exception and at.title[0].value == "the home page"  # Home is the default page
    files = sorted((REPO / "pages").glob("*.py"))
    assert listed == [("Home", ""), *[(f.stem.split("_", 1)[1].replace("_", " "), f.stem.split("_", 1)[1])
                                      for f in files]]
    assert ("Token entropy", "Token_entropy") in listed and ("Results", "Results") in listed


@pytest.mark.parametrize("page_file", ["pages/4_Pooling_ablation.py", "pages/7_Results.py"])
def test_every_table_and_figure_on_a_page_has_its_downloads(data_dir, page_file):
    at = open_page(page_file).run()
    assert not at.exception
    labels = [b.label for b in at.download_button]
    tables, charts = at.dataframe, at.get("plotly_chart")
    assert len(tables) >= 2 and charts
    assert labels.count("CSV") == labels.count("Parquet") == len(tables)
    assert labels.count("HTML") == len(charts) == len(at.segmented_control)
    for chart in charts:
        options = json.loads(chart.proto.config)["toImageButtonOptions"]
        assert options["format"] == "png" and options["filename"]
    camera = at.segmented_control[0]
    assert camera.options == ["PNG", "SVG"] and camera.value == "PNG"
    camera.set_value("SVG").run()
    assert not at.exception
    assert json.loads(at.get("plotly_chart")[0].proto.config)["toImageButtonOptions"]["format"] == "svg"


def test_no_page_calls_st_dataframe_or_plotly_chart_itself():
    """Pages and their glue show tables and figures through widgets.show_table / show_figure."""
    sources = [REPO / "app.py", *(REPO / "pages").glob("*.py"), *(REPO / "lenscope" / "app").glob("*.py")]
    direct = [p.name for p in sources if p.name != "widgets.py"
              and ("st.dataframe(" in (text := Path(p).read_text()) or "st.plotly_chart(" in text)]
    assert direct == []


def test_browser_camera_saves_png_or_svg_and_tables_download(fresh_server, page):
    """In a real browser: the chart's camera saves PNG, then SVG once picked (plotly.js draws both: no kaleido), and
    a table's buttons save its CSV and Parquet."""
    from lenscope.benchmarks.browser import settle

    page.goto(f"{fresh_server}/Pooling_ablation", timeout=120_000)
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.wait_for(timeout=180_000)
    settle(page)

    def camera():
        chart.hover()
        with page.expect_download() as saved:
            chart.locator('.modebar-btn[data-title^="Download plot"]').first.click()
        return saved.value

    png = camera()
    assert png.suggested_filename == "pooling-ablation.png" and png.path().read_bytes()[:4] == b"\x89PNG"
    page.get_by_role("radiogroup", name="Camera saves").first.get_by_role("radio", name="SVG").click()
    settle(page)
    svg = camera()
    assert svg.suggested_filename == "pooling-ablation.svg" and b"<svg" in svg.path().read_bytes()[:500]
    for label, suffix in (("CSV", ".csv"), ("Parquet", ".parquet")):
        with page.expect_download() as saved:
            page.get_by_test_id("stDownloadButton").filter(has_text=label).first.locator("button").click()
        assert saved.value.suggested_filename == f"pooling-ablation-mae{suffix}"
    table = pd.read_parquet(saved.value.path())
    assert table.columns[0] == "pooling" and "egtp" in table["pooling"].tolist()
    assert page.locator('[data-testid="stException"]').count() == 0
