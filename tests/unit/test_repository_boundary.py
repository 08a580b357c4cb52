"""The guard that keeps the suite inside the repository (a user's clone has no ../shared beside it)."""

from __future__ import annotations

import os

import pytest

from tests import repository_boundary
from tests.repository_boundary import REPO, outside_repository


def test_paths_beside_the_repository_are_outside_and_its_own_are_not(tmp_path):
    assert outside_repository(REPO.parent / "shared" / "traces" / "splitwise_perf_model.csv")
    assert outside_repository(REPO.parent)
    assert outside_repository(os.path.join(REPO, "..", "shared"))
    assert not outside_repository(REPO / "data" / "traces" / "splitwise_perf_model.csv")
    assert not outside_repository(REPO)
    assert not outside_repository(tmp_path / "x.csv")
    sibling = REPO.parent / (REPO.name + "-other")  # shares the repository's name as a prefix, still outside
    assert outside_repository(sibling / "f.txt")


def test_an_open_beside_the_repository_is_recorded():
    start = len(repository_boundary.touched)
    missing = REPO.parent / "lenscope-boundary-probe-does-not-exist.csv"
    with pytest.raises(FileNotFoundError):
        open(missing)
    recorded = repository_boundary.touched[start:]
    del repository_boundary.touched[start:]  # recorded on purpose: the autouse guard must not fail this test
    assert recorded == [str(missing)]
    open(REPO / "README.md").close()
    assert repository_boundary.touched[start:] == []
