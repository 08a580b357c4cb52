"""EGTP end to end: CLI on a tiny store of real short generations, the three pages with and without
data (AppTest), and one real-browser check of the pooling ablation page."""

import pytest

from lenscope.analysis.data.prompts import PromptItem
from lenscope.cli import main
from lenscope.jobs.egtp.heads import ABLATION_KIND, ATTRIBUTION_KIND, HEAD_VARIANTS, PLP_KIND, STATIC_KIND, train_static
from lenscope.jobs.runs.collect import collect_dataset
from lenscope.jobs.runs.datasets import dataset_runs
from lenscope.models.engine import GenerationSettings
from tests.apptest import open_page

PROMPTS = ["Say hi.", "Name a color.", "Count to five.", "What is 2+2?", "Write a haiku about rain.",
           "List three fruits.", "Explain gravity in one sentence.", "Give a synonym for fast.",
           "Describe a cat.", "What is the capital of France?"]
PAGES = ["pages/2_Attribution.py", "pages/3_Remaining_length.py", "pages/4_Pooling_ablation.py"]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory, target):
    """A store with 10 real short generations (tasks tiny0..tiny9: 6 train, 2 val, 2 test) in dataset ``tiny``,
    trained through the CLI on every run (8-token answers mostly hit the cap: ``--include-censored``)."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("egtp-data")
        mp.setenv("LENSCOPE_DATA_DIR", str(path))
        mp.delenv("LENSCOPE_DB_URL", raising=False)
        from lenscope.store.store import Store

        collect_dataset(Store(), target, "tiny", [PromptItem(p, "user", f"tiny{i}") for i, p in enumerate(PROMPTS)],
                        GenerationSettings(8, 0.7, 1.0, 0))
        codes = [main(["train-egtp", "--dataset", "tiny", "--epochs", "3", "--include-censored"]),
                 main(["train-plp", "--dataset", "tiny", "--epochs", "2", "--include-censored"]),
                 main(["attribution", "--dataset", "tiny", "--bootstrap", "50", "--include-censored"]),
                 main(["attribution", "--dataset", "tiny", "--evidence", "--epochs", "3", "--bootstrap", "50",
                       "--permutations", "20", "--include-censored"])]
        yield path, codes


@pytest.fixture
def use_dir(monkeypatch, target):
    """Point the store at a data dir (the app's store follows the settings); the app gets the session model."""
    import lenscope.app.widgets

    def use(path):
        monkeypatch.setenv("LENSCOPE_DATA_DIR", str(path))
        monkeypatch.delenv("LENSCOPE_DB_URL", raising=False)
        monkeypatch.setattr(lenscope.app.widgets, "get_target", lambda spec, device="auto", dtype="float32": target)

    return use


def test_cli_trains_and_stores_everything(trained_dir, use_dir):
    path, codes = trained_dir
    use_dir(path)
    from lenscope.store.store import Store

    store = Store()
    assert codes == [0, 0, 0, 0]
    static = store.predictors_frame(STATIC_KIND)
    assert sorted(static["name"]) == sorted(f"{STATIC_KIND}-{p}-tiny-L30" for p in ("egtp", "mean", "max", "last"))
    preds = store.predictions_frame(int(static["predictor_id"].iloc[0]))
    runs = store.runs_frame("tiny").set_index("run_id")
    assert len(preds) == 10 and (preds["step"] == 0).all()
    splits = dataset_runs(store, "tiny", include_censored=True).set_index("run_id")["split"]
    assert (preds["split"] == preds["run_id"].map(splits)).all()
    assert (preds["true"] == preds["run_id"].map(runs["output_tokens"])).all()
    ablation = store.results_frame(ABLATION_KIND)["payload"].iloc[0]
    assert {r["pooling"] for r in ablation["rows"]} == {"egtp", "mean", "max", "last"}
    assert all(r["mae_lo"] <= r["mae"] <= r["mae_hi"] for r in ablation["rows"])
    assert {"egtp - mean", "egtp - max", "egtp - last", "egtp - constant"} <= {p["comparison"]
                                                                              for p in ablation["paired"]}
    assert [v["variant"] for v in ablation["head_variants"]][1:] == list(HEAD_VARIANTS)
    plp = store.predictions_frame(int(store.predictors_frame(PLP_KIND)["predictor_id"].iloc[0]))
    assert (plp["true"] == plp["run_id"].map(runs["output_tokens"]) - plp["step"]).all()
    attribution = store.results_frame(ATTRIBUTION_KIND)["payload"].iloc[0]
    assert [s["head"] for s in attribution["summaries"]] == ["egtp", "mean"]
    n_tokens = sum(len(r["entropy"]) for r in attribution["runs"])
    assert attribution["summaries"][0]["n_tokens"] == n_tokens > 0


def test_cli_reports_missing_dataset(data_dir, capsys):
    assert main(["train-egtp", "--dataset", "nope"]) == 2
    assert "lenscope collect" in capsys.readouterr().err


@pytest.mark.parametrize("page_file", PAGES)
def test_pages_without_data_say_what_to_run(data_dir, use_dir, page_file, no_shipped_results):
    use_dir(data_dir)
    at = open_page(page_file).run()
    assert not at.exception
    assert any("Run the starter study" in i.value for i in at.info)
    assert [b.label for b in at.button] == ["Run the starter study"]


def test_pages_render_with_data(trained_dir, use_dir, no_shipped_results):
    use_dir(trained_dir[0])
    at = open_page("pages/4_Pooling_ablation.py").run()
    assert not at.exception and len(at.get("plotly_chart")) == 1

    at = open_page("pages/2_Attribution.py").run()
    assert not at.exception
    assert at.info[0].value.startswith("**Verdicts** (raw r, like for like with the paper's; then within runs):\n\n- "
                                       "attention pooling (learned) head")
    assert "test MAE [95% CI]" in at.dataframe[0].value.columns  # each head's MAE and weight entropy first
    evidence = at.dataframe[1].value
    assert {"attention pooling (learned)", "mean pooling", "egtp pooling"} < set(evidence["head"])
    assert evidence["note"].str.contains("true by construction").any()
    assert evidence.iloc[-1]["Pearson r [95% CI]"] == "0.451"
    assert len(at.get("plotly_chart")) == 2  # the evidence scatter and one test prompt's bars
    at.selectbox(key="evidence_head").set_value("mean pooling").run()
    assert not at.exception and any("does not vary within runs" in w.value for w in at.warning)
    at.sidebar.number_input[2].set_value(30).run()
    assert not at.exception and len(at.get("plotly_chart")) == 3
    assert any("0.451" in str(row) for row in at.dataframe[1].value.to_dict("records"))

    at = open_page("pages/3_Remaining_length.py").run()
    assert not at.exception and len(at.get("plotly_chart")) == 1
    at.slider[0].set_value(8)
    next(b for b in at.button if b.label == "Generate and predict").click().run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 2


def test_pages_train_button_on_synthetic_dataset(data_dir, use_dir, no_shipped_results):
    from lenscope.store.store import Store
    from tests.egtp_data import synthetic_dataset

    use_dir(data_dir)
    synthetic_dataset(Store(), "dev", n=30)
    at = open_page("pages/4_Pooling_ablation.py").run()
    assert any("train-egtp" in i.value for i in at.info)
    at.button[0].click().run()
    assert not at.exception and not at.error and len(at.get("plotly_chart")) == 1


def test_browser_pooling_ablation(server_data_dir, streamlit_server, page, monkeypatch):
    from lenscope.analysis.egtp.training import HeadConfig
    from lenscope.store.store import Store
    from tests.conftest import ARTIFACTS
    from tests.egtp_data import synthetic_dataset

    monkeypatch.setenv("LENSCOPE_DATA_DIR", str(server_data_dir))
    monkeypatch.delenv("LENSCOPE_DB_URL", raising=False)
    store = Store()
    synthetic_dataset(store, "dev", n=30)
    train_static(store, "dev", config=HeadConfig(epochs=5, hidden=16))
    page.goto(f"{streamlit_server}/Pooling_ablation?dataset=dev", timeout=120_000)  # a link names its dataset
    page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    page.get_by_text("Paper (reference only)").first.wait_for(timeout=30_000)
    assert page.locator(".js-plotly-plot").count() == 1
    page.screenshot(path=str(ARTIFACTS / "egtp_pooling_ablation.png"), full_page=True)
