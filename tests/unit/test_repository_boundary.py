"""The guard that keeps the suite off ../shared and sibling checkouts, wherever the clone sits."""

from __future__ import annotations

import os

import pytest

from tests import repository_boundary
from tests.repository_boundary import REPO, neighbour


def test_shared_and_sibling_checkouts_are_neighbours_and_the_repository_is_not(tmp_path):
    assert neighbour(REPO.parent / "shared" / "traces" / "splitwise_perf_model.csv")
    assert neighbour(os.path.join(REPO, "..", "shared"))
    assert not neighbour(REPO / "data" / "traces" / "splitwise_perf_model.csv")
    assert not neighbour(REPO)
    assert not neighbour(tmp_path / "x.csv")


def _clone_in(folder, name: str = "lenscope"):
    """A stand-in of a lenscope clone named ``name`` inside ``folder``: its top level, empty (the guard reads paths
    and what exists, never a file's content)."""
    repo = folder / name
    for part in (".git", "pages", "lenscope"):
        (repo / part).mkdir(parents=True)
    (repo / "app.py").touch()
    return repo


def test_a_clone_in_tmp_may_use_pytest_s_folders_beside_it(tmp_path):
    """Cloned into /tmp, pytest's tmp_path (/tmp/pytest-of-USER/...) lies beside the clone: allowed."""
    repo = _clone_in(tmp_path)
    (tmp_path / "pytest-of-root" / "pytest-3").mkdir(parents=True)
    assert not neighbour(tmp_path / "pytest-of-root" / "pytest-3" / "test_x0" / "data.csv", repo)
    assert not neighbour(tmp_path, repo)  # the parent itself (mkdtemp, gettempdir) is no neighbour's content


def test_a_clone_in_the_home_folder_may_use_the_model_cache_beside_it(tmp_path):
    """Cloned into ~, the model copy in ~/.cache/lenscope/gguf lies beside the clone: allowed."""
    repo = _clone_in(tmp_path)
    assert not neighbour(tmp_path / ".cache" / "lenscope" / "gguf" / "smollm2" / "model.safetensors", repo)
    assert not neighbour(tmp_path / ".local" / "share" / "lenscope" / "lenscope.db", repo)
    (tmp_path / ".pyenv" / ".git").mkdir(parents=True)  # a checkout, but not of lenscope: the interpreter's
    assert not neighbour(tmp_path / ".pyenv" / "versions" / "3.11.7" / "lib" / "python3.11" / "os.py", repo)


def test_shared_and_a_sibling_checkout_are_refused_wherever_the_clone_sits(tmp_path):
    repo = _clone_in(tmp_path)
    other = _clone_in(tmp_path, "lenscope-other")  # shares the repository's name as a prefix
    assert neighbour(tmp_path / "shared" / "traces" / "x.csv", repo)
    assert neighbour(other / "data" / "f.txt", repo)
    frozen = _clone_in(tmp_path, "frozen")
    (frozen / ".git").rmdir()
    (frozen / ".git").write_text("gitdir: /elsewhere\n")  # a worktree's .git is a file
    assert neighbour(frozen / "cache" / "x.py", repo)
    assert not neighbour(repo / "data" / "x.csv", repo)


def test_an_open_in_shared_is_recorded():
    start = len(repository_boundary.touched)
    missing = REPO.parent / "shared" / "lenscope-boundary-probe-does-not-exist.csv"
    with pytest.raises(FileNotFoundError):
        open(missing)
    recorded = repository_boundary.touched[start:]
    del repository_boundary.touched[start:]  # recorded on purpose: the autouse guard must not fail this test
    assert recorded == [str(missing)]
    open(REPO / "README.md").close()
    assert repository_boundary.touched[start:] == []
