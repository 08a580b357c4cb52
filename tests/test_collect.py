"""Dataset collection: library function and CLI, resuming from the cache."""

from analysis.prompts import PromptItem
from lenscope.cli import main
from lenscope.collect import collect_dataset
from models.target import GenerationSettings

PROMPTS = [PromptItem("Name a fruit.", "user", "a"), PromptItem("Name a planet.", "user", "b"),
           PromptItem("def add(a, b):", "humaneval", "c", "reasoning")]


def test_collect_three_prompts_stores_true_lengths_and_resumes(store, target):
    settings = GenerationSettings(max_new_tokens=10, temperature=0.7, seed=0)
    seen = []
    report = collect_dataset(store, target, "tiny", PROMPTS, settings,
                             on_progress=lambda done, total, hit: seen.append((done, total, hit)))
    assert (report.generated, report.cached) == (3, 0) and seen[-1] == (3, 3, False)
    frame = store.runs_frame(dataset="tiny")
    assert len(frame) == 3 and frame["scenario"].tolist() == ["chat", "chat", "reasoning"]
    for row in frame.itertuples():
        run = store.load_run(row.run_id)
        assert run.output_length == row.output_tokens == len(run.features) - run.prompt_len
        assert 1 <= row.output_tokens <= 10
    again = collect_dataset(store, target, "tiny", PROMPTS, settings)
    assert (again.generated, again.cached) == (0, 3) and again.run_ids == report.run_ids


def test_samples_per_prompt_use_distinct_seeds(store, target):
    settings = GenerationSettings(max_new_tokens=6, temperature=1.0, seed=10)
    report = collect_dataset(store, target, "rl", PROMPTS[:1], settings, samples_per_prompt=3)
    seeds = [store.load_run(r).settings["seed"] for r in report.run_ids]
    assert seeds == [10, 11, 12]


def test_collect_cli_end_to_end(data_dir, capsys):
    assert main(["collect", "--n", "2", "--max-new-tokens", "4", "--dataset", "cli",
                 "--sources", "sharegpt=1", "--max-prompt-chars", "200"]) == 0
    out = capsys.readouterr()
    assert "dataset 'cli': 2 runs (2 generated, 0 from the cache)" in out.out
    assert (data_dir / "lenscope.db").exists()


def test_collect_cli_reports_bad_input(data_dir, capsys):
    assert main(["collect", "--n", "2", "--sources", "nowhere=1"]) == 2
    assert "unknown prompt sources" in capsys.readouterr().err
