"""Dataset collection: library function and CLI, resuming from the cache."""

import gzip
import json

import pandas as pd
import pytest
import torch

from lenscope.analysis.data.prompts import PromptItem
from lenscope.analysis.drafter.training import target_topk
from lenscope.cli import main
from lenscope.jobs.runs import generations
from lenscope.jobs.runs.collect import collect_dataset
from lenscope.jobs.runs.generations import (
    export_generations,
    import_generations,
    read_generations,
    read_header,
    sample_prompts_of,
)
from lenscope.jobs.runs.target_topk import TOPK, TOPK_KIND, run_target_topk
from lenscope.models.engine import GenerationSettings

PROMPTS = [PromptItem("Name a fruit.", "user", "a"), PromptItem("Name a planet.", "user", "b"),
           PromptItem("def add(a, b):", "humaneval", "c", "reasoning")]


def test_collect_three_prompts_stores_true_lengths_and_resumes(store, target):
    settings = GenerationSettings(max_new_tokens=10, temperature=0.7, seed=0)
    seen = []
    report = collect_dataset(store, target, "tiny", PROMPTS, settings, batch_size=2,
                             on_progress=lambda done, total, label: seen.append((done, total, label)))
    assert (report.generated, report.cached) == (3, 0) and seen[-1][:2] == (3, 3)
    assert seen[-1][2].startswith("sampling | ") and seen[-1][2].endswith(" tok/s")
    assert report.tokens == sum(store.load_run(r).output_length for r in report.run_ids)
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


@pytest.mark.model  # the CLI loads the embedded model itself
def test_collect_cli_end_to_end(data_dir, capsys):
    assert main(["collect", "--n", "2", "--max-new-tokens", "4", "--dataset", "cli",
                 "--sources", "sharegpt=1", "--max-prompt-chars", "200"]) == 0
    out = capsys.readouterr()
    assert "dataset 'cli': 2 runs (2 generated, 0 from the cache, " in out.out
    assert "answer tokens in" in out.out and "tokens/s" in out.out
    assert (data_dir / "lenscope.db").exists()


def test_collect_cli_reports_bad_input(data_dir, capsys):
    assert main(["collect", "--n", "2", "--sources", "nowhere=1"]) == 2
    assert "unknown prompt sources" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["collect", "--n", "2", "--batch-size", "0"])
    assert "batch size must be 'auto' or a positive integer" in capsys.readouterr().err


def test_interrupted_collection_keeps_finished_runs_and_resumes(store, target):
    settings = GenerationSettings(max_new_tokens=8, temperature=0.7, seed=0)
    prompts = [PromptItem(f"Name a {thing}.", "user", thing) for thing in ("fruit", "planet", "colour", "tree")]

    def stop_after_two(done, total, label):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        collect_dataset(store, target, "cut", prompts, settings, batch_size=1, on_progress=stop_after_two)
    assert len(store.runs_frame(dataset="cut")) == 2
    again = collect_dataset(store, target, "cut", prompts, settings, batch_size=4)
    assert (again.generated, again.cached) == (2, 2) and len(store.runs_frame(dataset="cut")) == 4
    whole = collect_dataset(store, target, "whole", prompts, settings, batch_size=3)
    assert whole.cached == 4 and whole.run_ids == again.run_ids


def test_generations_round_trip_through_a_file_with_recomputed_features(store, target, tmp_path, monkeypatch):
    settings = GenerationSettings(max_new_tokens=6, temperature=0.7, seed=3)
    collect_dataset(store, target, "src", PROMPTS, settings, batch_size=3)
    path = tmp_path / "gens.jsonl.gz"
    assert export_generations(store, "src", path) == 3
    from lenscope.store.store import Store

    other = Store(url=f"sqlite:///{tmp_path}/other.db", tensor_dir=tmp_path / "other-tensors")
    header, records = read_generations(path)
    mixed = tmp_path / "mixed.jsonl.gz"  # the first run ends on the end token: --finished-only imports it alone
    end = min(target.stop_ids)
    finished = [{**r, "finished": True, "output_ids": [*r["output_ids"][:-1], end]} if i == 0 else r
                for i, r in enumerate(records)]
    assert not any(r["finished"] for r in records)  # 6 tokens: none of the collected answers ended
    with gzip.open(mixed, "wt") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in [header, *finished])
    part = Store(url=f"sqlite:///{tmp_path}/part.db", tensor_dir=tmp_path / "part-tensors")
    assert import_generations(part, target, mixed, "part", finished_only=True) == (1, 0)
    assert part.runs_frame(dataset="part")["finished"].tolist() == [True]
    assert import_generations(part, target, mixed, "part") == (2, 1)  # the rest, later
    monkeypatch.setattr(generations, "IMPORT_WINDOW_TOKENS", 1)  # a window a run: stored as they come, in file order
    seen = []
    assert import_generations(other, target, path, "copy", on_progress=lambda *a: seen.append(a[:2])) == (3, 0)
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert other.runs_frame(dataset="copy")["prompt"].tolist() == [r["prompt"] for r in records]
    assert import_generations(other, target, path, "copy") == (0, 3)
    copied = other.runs_frame(dataset="copy").sort_values("prompt")
    original = store.runs_frame(dataset="src").sort_values("prompt")
    assert copied["output_tokens"].tolist() == original["output_tokens"].tolist()
    assert copied["scenario"].tolist() == original["scenario"].tolist()
    for a, b in zip(original["run_id"], copied["run_id"]):
        ra, rb = store.load_run(int(a)), other.load_run(int(b))
        assert ra.features.input_ids.tolist() == rb.features.input_ids.tolist() and ra.finished == rb.finished
        torch.testing.assert_close(ra.features.entropy, rb.features.entropy, atol=1e-3, rtol=0)
        assert rb.features.topk_ids.shape[1] == 5  # the runs keep their top-5; the drafters' top-32 is kept apart
        kept = run_target_topk(other, target, rb)  # kept by the import: what the stored final states give
        fresh = target_topk(target.next_token_logits(rb.features.hidden[target.num_layers]), TOPK)
        assert kept[0].shape == (len(rb.features), TOPK)
        assert (kept[0][:, 0] == fresh[0][:, 0]).float().mean() >= 0.95  # float16 states may flip a near tie
        torch.testing.assert_close(kept[1].float(), fresh[1], atol=2e-2, rtol=0)
    assert len(other.results_frame(kind=TOPK_KIND)) == 3
    again = collect_dataset(other, target, "copy", PROMPTS, settings)  # a continued collection skips them
    assert (again.generated, again.cached) == (0, 3)
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="not a lenscope generations file"):
        import_generations(other, target, tmp_path / "bad.jsonl.gz", "bad")
    assert read_header(path)["model"] == target.source.spec == header["model"]
    foreign = tmp_path / "foreign.jsonl.gz"  # same prompt tokens, but another model's answers
    with gzip.open(foreign, "wt") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in [{**header, "model": "embedded:gemma3-270m"}, *records])
    with pytest.raises(ValueError, match="holds answers of embedded:gemma3-270m"):
        import_generations(other, target, foreign, "foreign")


def test_a_sample_of_prompts_keeps_every_answer_of_a_drawn_prompt():
    records = ([{"scenario": "chat", "prompt": f"c{i}"} for i in range(10)]
               + [{"scenario": "rl", "prompt": f"r{i}", "seed": k} for i in range(5) for k in range(4)])
    chosen = sample_prompts_of(records, {"chat": 3, "rl": 2, "long": 4}, seed=1)
    assert chosen == sample_prompts_of(records, {"chat": 3, "rl": 2, "long": 4}, seed=1)  # reproducible
    assert chosen == [r for r in records if r in chosen]  # in file order
    assert len({r["prompt"] for r in chosen if r["scenario"] == "chat"}) == 3
    assert sorted(r["seed"] for r in chosen if r["scenario"] == "rl") == [0, 0, 1, 1, 2, 2, 3, 3]
    assert chosen != sample_prompts_of(records, {"chat": 3, "rl": 2}, seed=2)
    assert len(sample_prompts_of(records, {"chat": 50}, seed=0)) == 10  # at most what the file has


def test_runs_record_where_the_users_content_starts(store, target):
    """SmolLM2's template puts a fixed 24-token system turn and user header before the user's text; runs
    record that boundary, and ``system_prompt`` changes the turn (and the run's settings and key)."""
    default_ids = target.chat_ids("Name a fruit.")
    assert target.content_start(default_ids) == 24
    assert target.tokenizer.decode(default_ids[24:]).startswith("Name a fruit.")
    none_ids = target.chat_ids("Name a fruit.", "none")
    assert target.tokenizer.decode(none_ids[:target.content_start(none_ids, "none")]).endswith("user\n")
    assert len(none_ids) < len(default_ids)
    plain = collect_dataset(store, target, "span", PROMPTS[:1], GenerationSettings(4, 0.7, 1.0, 0))
    empty = collect_dataset(store, target, "span", PROMPTS[:1], GenerationSettings(4, 0.7, 1.0, 0, "none"))
    first, second = store.load_run(plain.run_ids[0]), store.load_run(empty.run_ids[0])
    assert first.content_start == 24 and "system_prompt" not in first.settings
    assert second.settings["system_prompt"] == "none" and second.content_start == len(none_ids) - (
        len(default_ids) - 24)
    assert first.id != second.id


@pytest.mark.model  # the CLI process loads the embedded model itself
def test_a_collection_killed_mid_batch_resumes_without_lost_duplicated_or_damaged_runs(data_dir):
    import os
    import signal
    import subprocess
    import sys
    import time

    from lenscope.jobs.runs.store_check import check_store
    from lenscope.store.store import Store

    argv = [sys.executable, "-m", "lenscope", "collect", "--n", "4", "--max-new-tokens", "48", "--batch-size", "1",
            "--dataset", "killed", "--sources", "sharegpt=1", "--max-prompt-chars", "300"]
    env = {**os.environ, "LENSCOPE_DATA_DIR": str(data_dir)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    # wait for the first batch stored in the dataset (a run is stored, then listed in its dataset), then kill -9
    while time.time() < deadline and proc.poll() is None:
        if (data_dir / "lenscope.db").exists() and len(Store().runs_frame(dataset="killed")) > 0:
            break
        time.sleep(0.5)
    assert proc.poll() is None, "the collection ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = len(Store().runs_frame(dataset="killed"))
    assert 0 < kept < 4
    assert subprocess.run(argv, env=env, capture_output=True, timeout=900).returncode == 0
    store = Store()
    runs = store.runs_frame(dataset="killed")
    assert len(runs) == 4 and len(store.runs_frame()) == 4  # nothing lost, nothing stored twice
    check = check_store(store, grace_s=0)
    assert not check.integrity and not check.damaged_runs and not check.temp_files
    for run_id in runs["run_id"]:
        store.load_run(int(run_id), layers=[])  # every tensor file verifies


def test_censored_runs_import_features_of_their_first_answer_steps_and_complete_in_place(store, target, tmp_path):
    from lenscope.jobs.drafter.training import load_examples
    from lenscope.jobs.runs.features import run_features
    from lenscope.jobs.runs.generate import generate_cached
    from lenscope.store.store import Store

    settings = GenerationSettings(max_new_tokens=12, temperature=0.7, seed=5)
    collect_dataset(store, target, "src", PROMPTS[:2], settings, batch_size=2)
    path, again = tmp_path / "gens.jsonl.gz", tmp_path / "again.jsonl.gz"
    export_generations(store, "src", path)
    header, records = read_generations(path)
    assert not any(r["finished"] for r in records) and all(len(r["output_ids"]) == 12 for r in records)
    cut = Store(url=f"sqlite:///{tmp_path}/cut.db", tensor_dir=tmp_path / "cut-tensors")
    assert import_generations(cut, target, path, "study", censored_answer_tokens=5) == (2, 0)
    assert import_generations(cut, target, path, "study", censored_answer_tokens=5) == (0, 2)  # stored: found
    original = {r.prompt: r.run_id for r in store.runs_frame("src").itertuples()}
    for row in cut.runs_frame("study").itertuples():
        run, full = cut.load_run(int(row.run_id)), store.load_run(original[row.prompt])
        assert run.features_cut and len(run.features) == run.prompt_len + 5 == row.feature_positions
        assert run.output_ids == full.output_ids and run.output_length == 12
        torch.testing.assert_close(run.features.entropy, full.features.entropy[:len(run.features)], atol=1e-3, rtol=0)
        assert run_target_topk(cut, target, run)[0].shape == (len(run.features), TOPK)
        assert run_features(cut, run.id, 30, 1.0)["generated.egtp"].shape[0] == 5
    export_generations(cut, "study", again)  # every answer id goes back out
    assert read_generations(again)[1] == records
    with pytest.raises(ValueError, match="first answer tokens only"):
        load_examples(cut, None, "study", [2], include_censored=True)
    assert load_examples(cut, None, "study", [2]) == []  # finished runs only: nothing cut is read
    assert import_generations(cut, target, path, "study") == (2, 0)  # every position: completed in place
    for row in cut.runs_frame("study").itertuples():
        run = cut.load_run(int(row.run_id))
        assert not run.features_cut and len(run.features) == run.prompt_len + 12 and pd.isna(row.feature_positions)
        assert run_target_topk(cut, target, run)[0].shape == (len(run.features), TOPK)
        assert run_features(cut, run.id, 30, 1.0)["generated.egtp"].shape[0] == 12  # a key of its own: recomputed
    first = cut.runs_frame("study").iloc[0]
    import_generations(cut, target, path, "other", censored_answer_tokens=5)  # a full run is never cut again
    assert not cut.load_run(int(first["run_id"])).features_cut
    fresh = Store(url=f"sqlite:///{tmp_path}/fresh.db", tensor_dir=tmp_path / "fresh-tensors")
    import_generations(fresh, target, path, "study", censored_answer_tokens=5)
    was_cut = int(fresh.runs_frame("study").set_index("prompt").loc[first["prompt"], "run_id"])
    generated, hit = generate_cached(fresh, target, first["prompt"], settings)  # the token view reads every position
    assert not hit and generated.id == was_cut and not generated.features_cut and len(generated.features) == \
        generated.prompt_len + 12
