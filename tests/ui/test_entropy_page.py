"""The home page and the Token entropy page, through AppTest and a real browser."""

import pytest

from lenscope.figures.entropy import entropy_heatmap
from lenscope.jobs.runs.generate import generate_cached
from lenscope.jobs.runs.token_view import token_table
from lenscope.models.engine import GenerationSettings
from tests.apptest import open_page


def test_heatmap_cells_match_run(store, target):
    run, _ = generate_cached(store, target, "Hi there.", GenerationSettings(6, 0.7, 1.0, 0))
    table = token_table(run, target.tokenizer)
    fig = entropy_heatmap(table, width=8)
    z = fig.data[0].z
    cells = [v for row in z for v in row if v == v]
    assert len(cells) == len(run.features)
    assert sorted(cells) == sorted(run.features.entropy.tolist())
    assert "top-5 next" in fig.data[0].hovertext[0][0]


@pytest.mark.model  # the app loads the embedded model itself
def test_home_page_shows_model_and_store(data_dir, no_shipped_results):
    at = open_page("app.py").run()
    assert not at.exception
    assert any("30 layers" in m.value for m in at.markdown)
    assert [m.value for m in at.metric] == ["0", "0", "0"]
    assert at.button(key="starter").label == "Run the starter study"
    steps = " ".join(m.value for m in at.markdown)
    assert "import the finished answers of 124 prompts drawn from the shipped study" in steps  # the embedded model
    assert "claims" in steps and "to do" in steps and "done" not in steps


@pytest.mark.model  # the app loads the embedded model itself
def test_home_page_collects_a_dataset_with_progress(data_dir):
    at = open_page("app.py").run()
    at.text_input(key="collect_name").input("home")
    at.number_input(key="collect_n").set_value(2)
    at.slider(key="collect_humaneval").set_value(0.0)
    at.number_input(key="collect_max_new").set_value(4)
    at.button(key="collect_button").click().run()
    assert not at.exception and not at.error
    assert any("2 runs in 'home': 2 generated" in s.value for s in at.success)
    at.run()
    assert [m.value for m in at.metric][:2] == ["2", "1"]


@pytest.mark.model  # the app loads the embedded model itself
def test_entropy_page_generates_and_stores(data_dir):
    at = open_page("pages/1_Token_entropy.py").run()
    assert not at.exception and at.info[0].value.startswith("Type a prompt")
    at.text_area(key="entropy_prompt").input("What is 2+2?")
    at.number_input(key="entropy_max_new").set_value(8)
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert any("generated now" in m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) == 2
    at.button[0].click().run()
    assert any("from the cache" in m.value for m in at.markdown)


@pytest.mark.model  # the app loads the embedded model itself
def test_entropy_page_rejects_empty_prompt(data_dir):
    at = open_page("pages/1_Token_entropy.py").run()
    at.text_area(key="entropy_prompt").input("   ")
    at.button[0].click().run()
    assert at.error and "empty" in at.error[0].value
    at.text_area(key="entropy_prompt").input("x" * 150_000)  # a paste over the limit is not silently dropped
    at.button[0].click().run()
    assert not at.exception and "the prompt has 150,000 characters; the limit is 100,000" in at.error[0].value


def test_browser_types_prompt_and_sees_heatmap(streamlit_server, page):
    from tests.conftest import ARTIFACTS

    page.goto(f"{streamlit_server}/Token_entropy", timeout=120_000)
    box = page.get_by_label("Prompt")
    box.wait_for(timeout=180_000)
    box.fill("Give me a fun fact about octopuses.")
    page.get_by_label("Max new tokens").fill("24")
    page.get_by_role("button", name="Generate").click()
    page.locator(".js-plotly-plot").first.wait_for(timeout=180_000)
    page.get_by_text("Next-token entropy per token").first.wait_for(timeout=30_000)
    assert page.locator(".js-plotly-plot").count() >= 2
    page.screenshot(path=str(ARTIFACTS / "token_entropy.png"), full_page=True)


def test_eight_browser_sessions_generate_and_replay_at_once_without_mixing(streamlit_server, server_data_dir,
                                                                           browser):
    from lenscope.benchmarks.browser import drive_sessions
    from lenscope.store.store import Store

    prompts = [f"Session {k}: name one {thing}." for k, thing in
               enumerate(["planet", "fruit", "colour", "tree", "river", "metal", "bird", "city"])]
    sessions = drive_sessions(browser, streamlit_server, prompts, max_new_tokens=12, first_n=500)
    assert [s.errors for s in sessions] == [[]] * 8
    assert all(s.run_id is not None and set(s.seconds) == {"generate", "replay"} for s in sessions)
    store = Store(url=f"sqlite:///{server_data_dir / 'lenscope.db'}", tensor_dir=server_data_dir / "tensors")
    assert [store.load_run(s.run_id).prompt for s in sessions] == prompts  # each page shows its own run
    for s in sessions:
        run = store.load_run(s.run_id)
        assert len(run.features) == run.prompt_len + run.output_length


@pytest.mark.model  # resetting the field loads the embedded model
def test_bad_model_path_is_reported_in_the_sidebar(data_dir, tmp_path):
    at = open_page("pages/1_Token_entropy.py").run()
    at.sidebar.text_input[0].input(str(data_dir / "no-such-model")).run()  # the data dir is an allowed root
    assert not at.exception
    assert any("does not exist" in e.value for e in at.sidebar.error)
    at.sidebar.text_input[0].input(str(tmp_path / "no-such-model")).run()  # outside every allowed root
    assert any("is not a model the app may load" in e.value for e in at.sidebar.error)
    at.sidebar.text_input[0].input("").run()
    assert not at.sidebar.error and at.info[0].value.startswith("Type a prompt")
