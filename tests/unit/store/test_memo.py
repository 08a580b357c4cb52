"""The memo of stored results (lenscope.store.memo): keys from configs, versions, one computation per key across
sessions and processes, batches, tensors, and a read-only store."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from lenscope.store.memo import TENSORS, VERSION_KEY, lock_folder, memo_key
from lenscope.store.store import Store, json_key


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_the_key_is_the_configs_canonical_json_and_the_old_key_when_unversioned(store):
    assert memo_key("k", {"a": 1, "b": [1, 2]}) == memo_key("k", {"b": [1, 2], "a": 1}) == json_key("k", {"a": 1,
                                                                                                     "b": [1, 2]})
    assert memo_key("k", {"a": 1}) != memo_key("k", {"a": 2}) != memo_key("other", {"a": 2})
    store.put_result("k", "stored before the memo", {"a": 1}, {"v": 0})  # a result of an older lenscope is found
    compute, calls = counting({"v": 1})
    assert store.memo("k", {"a": 1}, compute, name="n") == {"v": 0} and calls == []
    assert store.stored("k", {"a": 1}) == {"v": 0} and store.stored("k", {"a": 3}) is None


def test_computes_once_per_config_and_again_for_a_new_version(store):
    compute, calls = counting({"v": 1})
    first = store.memo_entry("k", {"a": 1}, compute, name="first")
    again = store.memo_entry("k", {"a": 1}, compute, name="first")
    assert (first.value, first.cached, again.value, again.cached, len(calls)) == ({"v": 1}, False, {"v": 1}, True, 1)
    store.memo("k", {"a": 2}, compute, name="other config")
    assert len(calls) == 2
    store.memo("k", {"a": 1}, compute, name="v2", version=2)
    store.memo("k", {"a": 1}, compute, name="v2", version=2)
    assert len(calls) == 3  # the new version computed once; the old result stays under the old key
    assert store.stored("k", {"a": 1}, version=2) == {"v": 1} and store.stored("k", {"a": 1}, version=3) is None
    rows = store.results_frame("k")
    assert len(rows) == 3 and {"a": 1, VERSION_KEY: 2} in rows["config"].tolist()
    with pytest.raises(ValueError, match=VERSION_KEY):
        store.memo("k", {VERSION_KEY: 1}, compute, name="x", version=1)


def test_refresh_recomputes_and_replaces(store):
    store.memo("k", {"a": 1}, lambda: {"v": 1}, name="n")
    assert store.memo("k", {"a": 1}, lambda: {"v": 2}, name="n", refresh=True) == {"v": 2}
    assert store.stored("k", {"a": 1}) == {"v": 2} and len(store.results_frame("k")) == 1


def test_concurrent_sessions_compute_a_key_once(data_dir):
    Store()
    calls, barrier = [], threading.Barrier(6)

    def slow():
        calls.append(threading.get_ident())
        time.sleep(0.3)
        return {"v": 42}

    def session(_):
        store = Store()  # each browser session opens its own store
        barrier.wait()
        return store.memo_entry("sim", {"trace": 1}, slow, name="same simulation")

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(session, range(6)))
    assert len(calls) == 1 and all(r.value == {"v": 42} for r in results)
    assert sum(not r.cached for r in results) == 1 and len(Store().results_frame("sim")) == 1
    assert not any(lock_folder(Store()).iterdir())  # lock files are removed by their holder


def test_a_failed_computation_stores_nothing_and_frees_the_key(store):
    def broken():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.memo("k", {"a": 1}, broken, name="n")
    assert store.stored("k", {"a": 1}) is None
    assert store.memo("k", {"a": 1}, lambda: {"v": 1}, name="n") == {"v": 1}


def _process_memo(url: str, tensor_dir: str, marker: str, start: float) -> dict:
    from pathlib import Path

    def slow():
        with open(marker, "a") as fh:
            fh.write("x")
        time.sleep(0.5)
        return {"v": 7}

    time.sleep(max(0.0, start - time.time()))
    return Store(url=url, tensor_dir=Path(tensor_dir)).memo("sim", {"trace": 2}, slow, name="n")


def test_processes_compute_a_key_once(store, tmp_path):
    marker = tmp_path / "computed"
    start = time.time() + 1.5
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_process_memo, [(store.url, str(store.tensors.root), str(marker), start)] * 2)
    assert results == [{"v": 7}, {"v": 7}] and marker.read_text() == "x"


def test_batches_compute_only_the_missing_distinct_configs(store):
    store.memo("emb", {"text": "a"}, lambda: {"n": 1}, name="a")
    seen = []

    def compute(positions):
        seen.append(list(positions))
        return [{"n": len(texts[i])} for i in positions]

    texts = ["a", "bb", "ccc", "bb", "dddd"]
    out = store.memo_many("emb", [{"text": t} for t in texts], compute, names=lambda i: texts[i], batch_size=2)
    assert [m.value["n"] for m in out] == [1, 2, 3, 2, 4] and [m.cached for m in out] == [True] + [False] * 4
    assert seen == [[1, 2], [4]]  # "bb" once, in batches of two
    again = store.memo_many("emb", [{"text": t} for t in texts], compute, names=lambda i: texts[i])
    assert all(m.cached for m in again) and len(seen) == 2


def test_tensors_are_recomputed_when_their_file_is_damaged(store):
    compute, calls = counting({"x": torch.arange(4.0)})
    assert torch.equal(store.memo("t", {"run": 1}, compute, name="n", codec=TENSORS)["x"], torch.arange(4.0))
    store.memo("t", {"run": 1}, compute, name="n", codec=TENSORS)
    assert len(calls) == 1
    store.tensors.path_for(store.stored("t", {"run": 1})["hash"]).write_bytes(b"damaged")
    assert store.stored("t", {"run": 1}, codec=TENSORS) is None
    assert torch.equal(store.memo("t", {"run": 1}, compute, name="n", codec=TENSORS)["x"], torch.arange(4.0))
    assert len(calls) == 2 and store.stored("t", {"run": 1}, codec=TENSORS) is not None


def test_a_read_only_store_reads_and_computes_without_keeping(store, monkeypatch):
    store.memo("k", {"a": 1}, lambda: {"v": 1}, name="n")
    monkeypatch.setattr(store, "read_only_reason", "the file is not writable")
    written = []
    monkeypatch.setattr(store, "put_result", lambda *args: written.append(args))
    assert lock_folder(store) is None
    assert store.memo("k", {"a": 1}, lambda: {"v": 9}, name="n") == {"v": 1}  # read as it is
    compute, calls = counting({"v": 2})
    assert store.memo("k", {"a": 2}, compute, name="n") == {"v": 2}
    assert store.memo("k", {"a": 2}, compute, name="n") == {"v": 2} and len(calls) == 2
    out = store.memo_many("k", [{"a": 1}, {"a": 3}], lambda pos: [{"v": 3} for _ in pos], names=["x", "y"])
    assert [m.value for m in out] == [{"v": 1}, {"v": 3}] and written == []


@pytest.mark.skipif(not __import__("os").environ.get("LENSCOPE_TEST_PG_URL"),
                    reason="LENSCOPE_TEST_PG_URL not set (.ci/run starts a local PostgreSQL)")
def test_postgresql_sessions_compute_a_key_once(tmp_path):
    import os

    from sqlalchemy import text

    url = os.environ["LENSCOPE_TEST_PG_URL"]
    with Store(url=url, tensor_dir=tmp_path).engine.begin() as conn:
        conn.execute(text("DELETE FROM results WHERE kind = 'memo-pg'"))
    calls, barrier = [], threading.Barrier(4)

    def slow():
        calls.append(1)
        time.sleep(0.3)
        return {"v": 1}

    def session(_):
        store = Store(url=url, tensor_dir=tmp_path)
        barrier.wait()
        return store.memo("memo-pg", {"trace": 1}, slow, name="n")

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(session, range(4))) == [{"v": 1}] * 4
    assert len(calls) == 1
