"""Collection and sweeps on a local Ray cluster of 2 workers give what one process gives; a killed worker's
shard is retried without duplicate runs."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest
import torch

from lenscope.analysis.data.prompts import PromptItem
from lenscope.jobs.runs.collect import collect_dataset
from lenscope.jobs.runs.ray_cluster import WORKER_NAME, RayOptions
from lenscope.models.engine import GenerationSettings
from lenscope.store.store import Store

ray = pytest.importorskip("ray")

PROMPTS = [PromptItem(text, "user", f"r{i}") for i, text in enumerate(
    ["Name a fruit.", "Name a planet.", "Say hi.", "Count to three.", "Name a colour.", "Name a river."])]
SETTINGS = GenerationSettings(max_new_tokens=8, temperature=0.7, seed=3)
TWO_WORKERS = RayOptions(workers=2, shard_size=1, num_cpus=2)


@pytest.fixture(scope="module")
def local_cluster():
    """A local Ray cluster of 2 CPU slots for this module."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    yield
    ray.shutdown()


def answers(store: Store, run_ids: list[int]) -> list[tuple]:
    """Per run, in request order: the prompt, all token ids, finished flag and sampling settings."""
    runs = [store.load_run(run_id) for run_id in run_ids]
    return [(r.prompt, r.features.input_ids.tolist(), r.finished, r.settings) for r in runs]


@pytest.fixture(scope="module")
def single_process(tmp_path_factory, target):
    """The reference: the same requests collected in this process."""
    root = tmp_path_factory.mktemp("single")
    store = Store(url=f"sqlite:///{root / 'db.sqlite'}", tensor_dir=root / "tensors")
    report = collect_dataset(store, target, "ref", PROMPTS, SETTINGS, samples_per_prompt=1)
    return store, report


def check_same_runs(store: Store, run_ids: list[int], single_process) -> None:
    ref_store, ref = single_process
    assert answers(store, run_ids) == answers(ref_store, ref.run_ids)
    for run_id, ref_id in zip(run_ids, ref.run_ids):
        mine, theirs = store.load_run(run_id).features, ref_store.load_run(ref_id).features
        assert torch.allclose(mine.entropy, theirs.entropy, atol=1e-3)


def test_two_workers_collect_the_same_runs_into_sqlite(tmp_path, target, local_cluster, single_process):
    store = Store(url=f"sqlite:///{tmp_path / 'db.sqlite'}", tensor_dir=tmp_path / "tensors")
    report = collect_dataset(store, target, "ray", PROMPTS, SETTINGS, ray=TWO_WORKERS)
    assert (report.generated, report.cached) == (len(PROMPTS), 0)
    check_same_runs(store, report.run_ids, single_process)
    again = collect_dataset(store, target, "ray", PROMPTS, SETTINGS, ray=TWO_WORKERS)
    assert (again.generated, again.run_ids) == (0, report.run_ids)  # resumed: nothing sampled twice


@pytest.mark.skipif(not os.environ.get("LENSCOPE_TEST_PG_URL"),
                    reason="LENSCOPE_TEST_PG_URL not set (.ci/run starts a local PostgreSQL)")
def test_two_workers_collect_the_same_runs_into_postgresql(tmp_path, target, local_cluster, single_process):
    # the database outlives this test (and its tmp_path): its tensor files live beside it, as a team's would
    url = os.environ["LENSCOPE_TEST_PG_URL"]
    tensors = Path(tempfile.gettempdir()) / f"lenscope-pg-tensors-{hashlib.sha256(url.encode()).hexdigest()[:12]}"
    store = Store(url=url, tensor_dir=tensors)
    name = f"ray-{tmp_path.name}"
    report = collect_dataset(store, target, name, PROMPTS, SETTINGS, ray=TWO_WORKERS)
    check_same_runs(store, report.run_ids, single_process)
    assert len(store.runs_frame(name)) == len(set(report.run_ids)) == len(PROMPTS)


def test_a_killed_worker_s_shard_is_retried_without_duplicates(tmp_path, target, local_cluster, single_process):
    store = Store(url=f"sqlite:///{tmp_path / 'db.sqlite'}", tensor_dir=tmp_path / "tensors")
    killed = []

    def kill_first_worker(done: int, total: int, label: str) -> None:
        if done >= 1 and not killed:  # both workers hold a shard now: the first one's dies with it
            worker = ray.get_actor(WORKER_NAME.format(0))
            killed.append(ray.get(worker.pid.remote()))
            ray.kill(worker, no_restart=True)

    report = collect_dataset(store, target, "retried", PROMPTS, SETTINGS, ray=TWO_WORKERS,
                             on_progress=kill_first_worker)
    assert killed and report.generated == len(PROMPTS)
    assert len(store.runs_frame()) == len(PROMPTS)  # every run stored once
    check_same_runs(store, report.run_ids, single_process)


def test_collect_command_runs_on_ray(data_dir, local_cluster, capsys):
    from lenscope.cli import main

    assert main(["collect", "--n", "2", "--max-new-tokens", "4", "--dataset", "cli", "--ray",
                 "--ray-workers", "2"]) == 0
    assert "(2 generated, 0 from the cache" in capsys.readouterr().out


def test_a_sweep_on_ray_equals_the_serial_table(tmp_path, local_cluster):
    import pandas as pd

    from lenscope.jobs.scheduler.grid_sweep import grid_outcomes, grid_table
    from tests.unit.scheduler.test_grid_sweep import GRID, TRACE
    from tests.unit.scheduler.test_theory import ONE_SERVER

    stores = [Store(url=f"sqlite:///{tmp_path / f'{side}.sqlite'}", tensor_dir=tmp_path / side) for side in "ab"]
    serial = grid_table(GRID, grid_outcomes(stores[0], TRACE, ONE_SERVER, GRID))
    fanned = grid_table(GRID, grid_outcomes(stores[1], TRACE, ONE_SERVER, GRID, ray=TWO_WORKERS))
    pd.testing.assert_frame_equal(fanned, serial)
