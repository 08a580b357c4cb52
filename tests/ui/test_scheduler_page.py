"""The Scheduler playground page through AppTest and a real browser."""

from __future__ import annotations

from tests.apptest import open_page

CONSTANT = "constant 238.5"  # the preset's constant reference: the loaded example's median output length


def _compare_table(at):
    return next(d.value for d in at.dataframe if "short_e2e_p99_s" in d.value)


def test_first_open_shows_a_visible_difference_and_what_to_look_at(data_dir, no_shipped_results):
    """A fresh clone's first open simulates the loaded example (2 prefill + 1 decode instances, decode-bound) without
    a press: LB+SJF cuts the short-request P99 well below RR+FCFS's, and one sentence says what to look at and why."""
    at = open_page("pages/6_Scheduler_playground.py").run()
    assert not at.exception and not at.error
    assert at.sidebar.selectbox(key="sched_builtin").value.startswith("Loaded example")
    table = _compare_table(at)
    assert table["label"].tolist() == ["RR+FCFS 2P+1D continuous", "LB+SJF 2P+1D continuous"]
    rr, lb = table["short_e2e_p99_s"]
    assert lb < 0.7 * rr  # measured: 12.4 s vs 7.6 s
    look = [i.value for i in at.info if i.value.startswith("Look at the short-request P99")]
    assert len(look) == 1 and f"from {rr:.1f} s (RR+FCFS) to {lb:.1f} s" in look[0]
    assert "decode is the bottleneck" in look[0] and not at.warning
    assert any("**2 configuration(s)** (0 read from the store)" in m.value for m in at.markdown)
    at.button(key="cmp_run").click().run()
    assert any("**2 configuration(s)** (2 read from the store)" in m.value for m in at.markdown)


def test_a_tie_says_why_and_reruns_where_the_policies_part(data_dir, no_shipped_results):
    """On a prefill-bound cluster the policies tie and the page says prefill was the bottleneck; the button measures
    the load where they part (with prefill instances enough) and reruns the page there."""
    at = open_page("pages/6_Scheduler_playground.py").run()
    at.sidebar.selectbox(key="sched_builtin").set_value("AzureLLMInferenceTrace_conv.csv")
    at.sidebar.number_input(key="sched_first_n").set_value(1000)
    at.sidebar.number_input(key="sched_qps").set_value(25.0)
    at.sidebar.number_input(key="sched_np").set_value(1)
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    tie = [w.value for w in at.warning if w.value.startswith("The configurations tie")]
    assert len(tie) == 1 and "because prefill was the bottleneck" in tie[0]
    at.button(key="cmp_part").click().run()
    assert not at.exception and not at.error
    notes = [c.value for c in at.caption if c.value.startswith("Measured: the configurations part at")]
    assert len(notes) == 1 and "prefill instances" in notes[0]
    qps, n_prefill = at.sidebar.number_input(key="sched_qps").value, at.sidebar.number_input(key="sched_np").value
    assert n_prefill > 1 and f"part at {qps:g} QPS" in notes[0]
    assert any(i.value.startswith("Look at the short-request P99") for i in at.info) and "cmp_part" not in [
        b.key for b in at.button]
    assert _compare_table(at)["label"].str.contains(f"{n_prefill}P\\+1D").all()


def test_page_runs_preset_and_compare(data_dir, no_shipped_results):
    at = open_page("pages/6_Scheduler_playground.py").run()
    assert not at.exception and not at.error
    assert any("Run OUTLETS preset" in i.value for i in at.info)
    assert at.number_input(key="preset_seeds").value >= 20
    at.number_input(key="preset_n").set_value(200)
    at.number_input(key="preset_seeds").set_value(2)
    at.button(key="preset_run").click().run()
    assert not at.exception and not at.error
    refs = next(d.value for d in at.dataframe if "share of the oracle's cut (%)" in d.value)
    assert refs[["predictor", "policy"]].values.tolist() == [[p, q] for p in ("oracle+noise (MAE 50)", "oracle",
                                                                           CONSTANT)
                                                             for q in ("RR+SJF", "LB+SJF")]
    assert set(refs["seeds"]) == {2} and "share of the oracle's cut (%)" in refs
    assert any("Means over 2 seeds with 95% Student-t intervals" in c.value for c in at.caption)
    labels = [m.label for m in at.metric]
    assert "Paper (OUTLETS, reported): short P99" in labels
    assert any(m.label.startswith("Ours") and m.delta.endswith("%") for m in at.metric)
    assert any("**3 configuration(s)** (0 read from the store)" in m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 5
    at.button(key="preset_run").click().run()
    assert any("**3 configuration(s)** (3 read from the store)" in m.value for m in at.markdown)


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
    assert set(_compare_table(at)["predictor"]) == {"trace column predicted_tokens"}


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
    assert all(p.startswith("empirical (file ") for p in _compare_table(at)["predictor"])
    classes = "".join(f"{t},{t // 100}\n" for t in range(10, 410, 10))  # class indices 0..4, read as lengths
    _predictions_uploader(at).set_value(("cls.csv", f"true_tokens,predicted_tokens\n{classes}".encode(),
                                         "text/csv")).run()
    assert not at.exception and any("look like class indices" in w.value and "Tick *Predictions are class indices*"
                                    in w.value for w in at.warning)
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


def test_browser_live_tab_serves_study_prompts_for_real_beside_the_simulator(streamlit_server, page):
    """The live tab profiles the embedded model, serves 4 held-out study prompts under FCFS and under SJF on a
    predictor's out-of-fold lengths, and shows the paired difference, the real-vs-simulated table and the CDFs."""
    from tests.conftest import ARTIFACTS

    page.goto(f"{streamlit_server}/Scheduler_playground", timeout=120_000)
    page.get_by_role("tab", name="Live serving").click()
    requests = page.get_by_role("spinbutton", name="Requests to serve")
    requests.fill("4")
    requests.press("Enter")
    button = page.get_by_role("button", name="Serve for real")
    button.wait_for(timeout=60_000)
    button.click()
    page.get_by_text("Mean end-to-end latency of FCFS minus SJF on").wait_for(timeout=300_000)
    assert page.get_by_text("over the same 4 requests (paired 95% bootstrap CI)").count() == 1
    page.get_by_text("4 requests at").first.wait_for(timeout=10_000)
    page.locator(".js-plotly-plot").last.wait_for(timeout=60_000)
    assert page.get_by_text("real run (solid) vs simulator (dashed)").count() >= 1
    page.get_by_text("at the machine's measured speed over time").first.click()  # the replay beside the real run
    page.get_by_text("FCFS: simulated at the machine's measured speed over time").first.wait_for(timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(ARTIFACTS / "scheduler_live_serving.png"), full_page=True)


def test_compare_with_a_prefill_queue_and_limited_preemption(data_dir):
    at = open_page("pages/6_Scheduler_playground.py").run()
    at.sidebar.number_input(key="sched_first_n").set_value(150)
    at.selectbox(key="cmp_q1").set_value("srpt")
    at.selectbox(key="cmp_pq1").set_value("spf")
    at.checkbox(key="cmp_pre1").check().run()
    at.number_input(key="cmp_c1").set_value(0.5)
    at.number_input(key="cmp_mp1").set_value(2)
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    labels = _compare_table(at)["label"].tolist()
    assert labels[1] == "LB+SRPT 2P+1D continuous prefill SPF preemptive (c=0.5, max 2)"


def test_chunked_prefill_in_colocated_mode(data_dir):
    at = open_page("pages/6_Scheduler_playground.py").run()
    at.sidebar.number_input(key="sched_first_n").set_value(100)
    assert at.sidebar.number_input(key="sched_chunk").disabled  # disaggregated by default
    at.sidebar.selectbox(key="sched_mode").set_value("colocated").run()
    at.sidebar.number_input(key="sched_chunk").set_value(100).run()
    assert any("raised to the batch-size cap (256)" in c.value for c in at.sidebar.caption)
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    assert all("1x colo continuous chunked 256" in label for label in _compare_table(at)["label"])


def test_a_mooncake_upload_runs_with_prefix_caching_and_cache_aware_dispatch(data_dir):
    import json

    at = open_page("pages/6_Scheduler_playground.py").run()
    lines = [json.dumps({"timestamp": 100 * t, "input_length": 1100, "output_length": 20 + t % 7,
                         "hash_ids": [t % 3, 10 + t % 3, 100 + t]}) for t in range(30)]
    at.sidebar.radio(key="sched_source").set_value("Upload file").run()
    at.sidebar.file_uploader[0].set_value(("mooncake.jsonl", "\n".join(lines).encode(), "application/json")).run()
    assert "prefix" not in at.selectbox(key="cmp_d1").options
    at.sidebar.number_input(key="sched_np").set_value(1)
    at.sidebar.number_input(key="sched_nd").set_value(3)
    at.sidebar.number_input(key="sched_prefix").set_value(65_536).run()
    at.selectbox(key="cmp_d1").set_value("prefix")
    at.button(key="cmp_run").click().run()
    assert not at.exception and not at.error
    table = _compare_table(at)
    assert table["label"].tolist()[1] == "PREFIX+SJF 1P+3D continuous prefix cache 65536"
    assert 0.5 < table["prefix_hit_rate"].iloc[1] < 1.0  # 27 of 30 prompts find 1,024 of 1,100 tokens


def test_qps_sweep_tab_shows_where_each_policy_saturates(data_dir, no_shipped_results):
    at = open_page("pages/6_Scheduler_playground.py").run()
    at.sidebar.number_input(key="sched_first_n").set_value(200)
    assert any("Run QPS sweep" in i.value for i in at.info)
    at.multiselect(key="qps_policies").set_value(["rr+fcfs", "lb+sjf"])
    at.text_input(key="qps_values").set_value("2, 200")
    at.button(key="qps_run").click().run()
    assert not at.exception and not at.error
    lines = [m.value for m in at.markdown if "saturates at" in m.value or "keeps up to" in m.value]
    assert lines == ["- LB+SJF: saturates at 200 QPS", "- RR+FCFS: saturates at 200 QPS"]
    sweep = next(d.value for d in at.dataframe if "backlog_growth" in d.value)
    assert sweep[["policy", "qps"]].to_dict("list") == {
        "policy": ["LB+SJF", "LB+SJF", "RR+FCFS", "RR+FCFS"], "qps": [2.0, 200.0, 2.0, 200.0]}
