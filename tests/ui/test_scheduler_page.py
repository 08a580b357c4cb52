"""The Scheduler playground page through AppTest and a real browser."""

from __future__ import annotations

from tests.apptest import open_page


def test_page_runs_preset_and_compare(data_dir):
    at = open_page("pages/6_Scheduler_playground.py").run()
    assert not at.exception and not at.error
    assert any("Run OUTLETS preset" in i.value for i in at.info)
    at.number_input(key="preset_n").set_value(200)
    at.button(key="preset_run").click().run()
    assert not at.exception and not at.error
    labels = [m.label for m in at.metric]
    assert "Paper (OUTLETS, reported): short P99" in labels
    assert any(m.label.startswith("Ours") and m.delta.endswith("%") for m in at.metric)
    assert any("0 from the store cache" in m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 5
    at.button(key="preset_run").click().run()
    assert any("3 from the store cache" in m.value for m in at.markdown)


def test_an_upload_in_unknown_columns_loads_through_the_column_mapping(data_dir):
    at = open_page("pages/6_Scheduler_playground.py").run()
    at.sidebar.radio(key="sched_source").set_value("Upload file").run()
    rows = "".join(f"{t * 250},{5 + t % 7},{20 + t % 11}\n" for t in range(40))
    at.sidebar.file_uploader[0].set_value(("mine.csv", f"t_ms,input,output\n{rows}".encode(), "text/csv")).run()
    assert not at.exception
    assert [s.label for s in at.sidebar.selectbox if s.key.startswith("sched_map")] == [
        "Arrival", "Prompt tokens", "Output tokens", "Arrival unit"]
    at.sidebar.selectbox(key="sched_map_unit").set_value("ms").run()
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    assert any("40 requests" in m.value for m in [*at.markdown, *at.caption])


def test_page_without_stored_traces_says_how_to_add_one(data_dir):
    at = open_page("pages/6_Scheduler_playground.py").run()
    at.sidebar.radio(key="sched_source").set_value("Stored trace").run()
    assert not at.exception
    assert any("Save trace in the store" in i.value for i in at.info)


def test_browser_runs_comparison(streamlit_server, page):
    from tests.conftest import ARTIFACTS

    page.goto(f"{streamlit_server}/Scheduler_playground", timeout=120_000)
    button = page.get_by_role("button", name="Run simulation")
    button.wait_for(timeout=120_000)
    button.click()
    page.locator(".js-plotly-plot").first.wait_for(timeout=180_000)
    page.get_by_text("End-to-end latency P99 by request class").first.wait_for(timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "scheduler_playground.png"), full_page=True)
