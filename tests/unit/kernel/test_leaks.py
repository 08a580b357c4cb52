"""Leak tests of the evaluation kernel: splits are fixed per source task (the same in every store, whatever
the seed), no task straddles splits, censored runs stay out unless asked for, replays never see in-sample
predictions, and prompt pooling gives the chat template's tokens no weight."""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from lenscope.analysis.core.splits import split_of, task_key
from lenscope.analysis.data.scenarios import reasoning_prompts, rl_prompts
from lenscope.analysis.egtp.pooling import POOLINGS
from lenscope.jobs.runs.datasets import dataset_counts, dataset_runs
from lenscope.jobs.runs.features import compute_run_features
from lenscope.jobs.scheduler.replay import check_out_of_sample, dataset_trace
from lenscope.store.store import NewRun, Store, StoredRun
from tests.fakes import fake_generation, fake_target

TASKS = [("sharegpt", f"conv{i}", f"Question number {i}?") for i in range(60)]


def _fill(store: Store, order, finished=lambda i: True) -> None:
    target = fake_target()
    dataset_id = store.ensure_dataset("d", store.ensure_model(target), {})
    for i in order:
        source, ref, text = TASKS[i]
        gen = replace(fake_generation(6, 3, seed=i), finished=finished(i))
        (run_id,) = store.save_runs(target, [NewRun(text, gen, source, ref)])
        store.add_to_dataset(dataset_id, run_id, "chat")


def test_split_has_no_seed_and_is_the_same_in_two_stores(tmp_path):
    assert "seed" not in inspect.signature(split_of).parameters
    first = Store(f"sqlite:///{tmp_path}/a.db", tmp_path / "a")
    second = Store(f"sqlite:///{tmp_path}/b.db", tmp_path / "b")
    _fill(first, range(len(TASKS)))
    _fill(second, reversed(range(len(TASKS))))  # other insertion order: other prompt and run ids
    a = dataset_runs(first, "d").set_index("prompt")["split"]
    b = dataset_runs(second, "d").set_index("prompt")["split"]
    ids_a = first.runs_frame("d").set_index("prompt")["prompt_id"]
    ids_b = second.runs_frame("d").set_index("prompt")["prompt_id"]
    assert (ids_a.sort_index() != ids_b.sort_index()).any()  # database ids differ, splits must not
    assert a.sort_index().equals(b.sort_index())
    assert set(a) == {"train", "val", "test"}


def test_wrappers_of_one_task_share_its_split():
    reasoning, rl = reasoning_prompts(209), rl_prompts(209)
    by_task: dict[str, set[str]] = {}
    for item in reasoning + rl:
        by_task.setdefault(task_key(item.source, item.ref, item.text), set()).add(split_of(
            task_key(item.source, item.ref, item.text)))
    assert len(by_task) == 209  # every task appears under both wrappers
    assert all(len(splits) == 1 for splits in by_task.values())
    assert task_key("user", "", "typed prompt") == task_key("user", "", "typed prompt") != task_key("user", "", "x")


def test_censored_runs_are_left_out_by_default_and_counted(store):
    _fill(store, range(20), finished=lambda i: i % 4 != 0)
    assert len(dataset_runs(store, "d")) == 15
    assert not dataset_runs(store, "d")["censored"].any()
    assert len(dataset_runs(store, "d", include_censored=True)) == 20
    counts = dataset_counts(store, "d")
    assert (counts.runs, counts.censored, counts.used) == (20, 5, 15) and sum(counts.by_split.values()) == 15
    assert "5 censored" in counts.caption()


def test_replays_refuse_in_sample_predictions(store):
    _fill(store, range(len(TASKS)))
    runs = dataset_runs(store, "d")
    predictions = pd.DataFrame({"run_id": runs["run_id"], "step": 0, "predicted": 1.0, "true": 1.0,
                                "split": runs["split"]})
    test_trace = dataset_trace(store, "d", qps=1.0)
    assert set(test_trace["run_id"]) == set(runs.loc[runs["split"] == "test", "run_id"])
    check_out_of_sample(predictions, test_trace["run_id"].to_numpy())
    everything = dataset_trace(store, "d", qps=1.0, split=None)
    with pytest.raises(ValueError, match="not in the predictor's test split"):
        check_out_of_sample(predictions, everything["run_id"].to_numpy())


def test_prompt_pooling_gives_template_tokens_no_weight():
    gen = fake_generation(prompt_len=30, output_length=4, layers=(1,))
    run = StoredRun(id=1, prompt_id=1, prompt="p", response="r", prompt_len=30, output_length=4, finished=True,
                    settings={}, features=gen.features, content_start=24)
    base = compute_run_features(run, 1, 1.0)
    loud = gen.features.hidden[1].clone()
    loud[:24] = 1e3 * torch.randn(24, 4)  # the template block: any states, any entropy
    entropy = gen.features.entropy.clone()
    entropy[:24] = 50.0
    changed = replace(run, features=replace(gen.features, hidden={1: loud}, entropy=entropy))
    after = compute_run_features(changed, 1, 1.0)
    for pooling in POOLINGS:
        assert torch.equal(base[f"prompt.{pooling}"], after[f"prompt.{pooling}"]), pooling
    assert np.allclose(base["prompt.mean"].numpy(), gen.features.hidden[1][24:30].mean(0).numpy(), atol=1e-6)
