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
        "Arrival", "Prompt tokens", "Output tokens", "Arrival unit", "Predicted tokens (optional)"]
    at.sidebar.selectbox(key="sched_map_unit").set_value("ms").run()
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    assert any("40 requests" in m.value for m in [*at.markdown, *at.caption])


def _upload_trace(at, text: str):
    at.sidebar.radio(key="sched_source").set_value("Upload file").run()
    return at.sidebar.file_uploader[0].set_value(("mine.csv", text.encode(), "text/csv")).run()


def test_a_trace_with_predictions_offers_the_trace_column_predictor(data_dir):
    at = open_page("pages/6_Scheduler_playground.py").run()
    assert "trace-column" not in at.sidebar.selectbox(key="sched_predictor").options
    rows = "".join(f"{t * 0.05},{5 + t % 7},{20 + t % 11},{200 - t}\n" for t in range(40))
    _upload_trace(at, f"arrival,prompt_tokens,output_tokens,predicted_tokens\n{rows}")
    assert any("carries predicted lengths" in c.value for c in at.sidebar.caption)
    picker = at.sidebar.selectbox(key="sched_predictor")
    assert "trace column" in picker.options
    picker.set_value("trace-column").run()
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert set(table["predictor"]) == {"trace column predicted_tokens"}


def _predictions_uploader(at):
    return next(u for u in at.sidebar.file_uploader if u.key == "sched_pred_file")


def test_an_external_predictions_file_is_evaluated_and_simulated(data_dir):
    at = open_page("pages/6_Scheduler_playground.py").run()
    at.sidebar.number_input(key="sched_first_n").set_value(150)
    at.sidebar.selectbox(key="sched_predictor").set_value("empirical").run()
    assert not at.exception and any("Upload an external predictor" in i.value for i in at.info)
    pairs = "".join(f"{t},{t + (7 if k % 2 else -5)}\n" for k, t in enumerate(range(10, 410, 10)))  # MAE 6
    data = f"true_tokens,predicted_tokens\n{pairs}".encode()
    _predictions_uploader(at).set_value(("mine.csv", data, "text/csv")).run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Pairs (n)"] == "40" and metrics["MAE (tokens), 95% CI"].startswith("6.0 [")
    assert metrics["Kendall tau, 95% CI"].startswith("0.9")
    confusion = at.dataframe[0].value
    assert confusion.to_numpy().sum() == 40 and confusion.shape == (5, 5)
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    assert all(p.startswith("empirical (file ") for p in at.dataframe[1].value["predictor"])
    _predictions_uploader(at).set_value(("bad.csv", b"true_tokens,predicted_tokens\n5,x\n6,7\n", "text/csv")).run()
    assert any("lines 2 (1 rows)" in e.value for e in at.error)


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
