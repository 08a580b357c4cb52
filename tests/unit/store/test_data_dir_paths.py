"""The data folder is a path, never URL text: a store is created, read and opened read-only in exactly the folder
``LENSCOPE_DATA_DIR`` names, whatever characters it holds (``?``, ``%``, ``#``, ``@``, spaces, any script)."""

from __future__ import annotations

import pytest

from lenscope.store.errors import store_location
from lenscope.store.memo import lock_folder
from lenscope.store.settings import get_settings, sqlite_file
from lenscope.store.store import Store
from tests.unit.store.test_store_ownership import _read_only, _store_with_a_dataset

# Each name holds text that URL syntax would read: a query (?), an escape (%41 is "A", %2F is "/"), a fragment (#).
FOLDERS = ["data?x=1", "p%41q", "a #b é@h:1 %2F?c=%"]


@pytest.mark.parametrize("name", FOLDERS)
def test_the_store_is_created_in_exactly_the_folder_named(tmp_path, monkeypatch, name):
    folder = tmp_path / name
    monkeypatch.setenv("LENSCOPE_DATA_DIR", str(folder))
    monkeypatch.delenv("LENSCOPE_DB_URL", raising=False)
    store = Store()
    prompt = store.ensure_prompt("a prompt")
    store.engine.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing beside it (no `data` for `data?x=1`)
    assert (folder / "lenscope.db").is_file()
    assert sqlite_file(get_settings().db_url) == folder / "lenscope.db"
    assert store_location(store.url) == str(folder / "lenscope.db")
    assert lock_folder(store) == folder / "locks"
    assert Store().ensure_prompt("a prompt") == prompt  # opened again: the same database


@pytest.mark.parametrize("name", FOLDERS)
def test_a_read_only_store_in_such_a_folder_reads(tmp_path, monkeypatch, name):
    folder = tmp_path / name
    monkeypatch.setenv("LENSCOPE_DATA_DIR", str(folder))
    monkeypatch.delenv("LENSCOPE_DB_URL", raising=False)
    store, run_id = _store_with_a_dataset()
    store.engine.dispose()
    with _read_only(folder, monkeypatch):
        ro = Store()
        assert ro.read_only_reason == "the file is not writable"
        assert ro.datasets_frame()["name"].tolist() == ["dev"] and ro.load_run(run_id).output_length == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
