"""A full disk under the store says so, and where: SQLite's "database or disk is full", its "disk I/O error" on a
disk with no space left, a tensor file that does not fit; ``doctor`` says the same instead of failing alike. The
disk is never really filled: SQLite's page limit makes a real SQLITE_FULL, the free space is asked of a stub."""

from __future__ import annotations

import errno
import shutil
import sqlite3
from collections import namedtuple

import pytest
import torch
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from lenscope.cli import main
from lenscope.errors import user_message
from lenscope.store.errors import StoreDiskFullError, StoreUnavailableError, store_error
from lenscope.store.store import Store

Usage = namedtuple("Usage", "total used free")


def _free(monkeypatch, free: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(1 << 40, (1 << 40) - free, free))


def _sqlite_error(message: str) -> OperationalError:
    return OperationalError("INSERT INTO prompts ...", {}, sqlite3.OperationalError(message))


def _full_message(folder, why: str) -> str:
    return f"the disk holding the store ({folder}) is full ({why}); free some space and run it again"


def test_a_store_that_cannot_grow_says_the_disk_is_full_and_where(data_dir, monkeypatch):
    store = Store()
    store.engine.dispose()
    event.listen(store.engine, "connect", lambda conn, record: conn.execute("PRAGMA max_page_count = 8"))
    _free(monkeypatch, 0)
    with pytest.raises(StoreDiskFullError) as caught:
        store.ensure_prompt("x" * 200_000)  # SQLite answers SQLITE_FULL: "database or disk is full"
    assert str(caught.value) == _full_message(data_dir, "database or disk is full; 0 bytes free")
    assert "doctor" not in str(caught.value)


def test_a_disk_io_error_on_a_disk_without_space_is_a_full_disk_and_with_space_is_not(data_dir, monkeypatch):
    url = f"sqlite:///{data_dir / 'lenscope.db'}"
    _free(monkeypatch, 4096)
    error = store_error(url, _sqlite_error("disk I/O error"))
    assert isinstance(error, StoreDiskFullError)
    assert str(error) == _full_message(data_dir, "disk I/O error; 4,096 bytes free")
    _free(monkeypatch, 50 << 30)
    error = store_error(url, _sqlite_error("disk I/O error"))
    assert not isinstance(error, StoreDiskFullError) and isinstance(error, StoreUnavailableError)
    assert "disk I/O error" in str(error) and "full" not in str(error)


def test_a_server_database_out_of_space_says_so(monkeypatch):
    url = "postgresql+psycopg2://u:secret@db.example:5432/lenscope"
    orig = Exception('could not extend file "base/16384/2619": No space left on device')
    error = store_error(url, OperationalError("INSERT ...", {}, orig))
    assert isinstance(error, StoreDiskFullError) and "(db.example:5432) is full" in str(error)
    assert "secret" not in str(error)


def test_doctor_on_a_full_disk_says_so_instead_of_failing_alike(store, data_dir, monkeypatch, capsys):
    _free(monkeypatch, 0)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert f"disk: {_full_message(data_dir, '0 bytes free')}" in out
    assert "the store is healthy" not in out and "doctor --fix" not in out

    def shm_cannot_grow(*args, **kwargs):  # a WAL store on a full disk: even opening it fails so
        raise _sqlite_error("disk I/O error")

    monkeypatch.setattr("lenscope.store.store.migrate", shm_cannot_grow)
    assert main(["doctor"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"lenscope doctor: error: {_full_message(data_dir, 'disk I/O error; 0 bytes free')}"


def test_a_tensor_file_that_does_not_fit_names_its_path(store, monkeypatch):
    def full(fd, mode):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("lenscope.store.tensors.os.fdopen", full)
    with pytest.raises(OSError) as caught:
        store.tensors.put({"x": torch.zeros(4)})
    assert caught.value.errno == errno.ENOSPC and caught.value.filename.startswith(str(store.tensors.root))
    assert f"the disk holding {store.tensors.root}" in user_message(caught.value)
    assert not [p for p in store.tensors.root.rglob("*") if p.is_file()]
