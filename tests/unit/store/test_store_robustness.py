"""The store under stress: older and newer schemas, a locked database, concurrent writers, PostgreSQL."""

import multiprocessing as mp
import os
import sqlite3

import pytest
from sqlalchemy import select

from lenscope.store.errors import StoreUnavailableError
from lenscope.store.schema import SCHEMA_VERSION, Run
from lenscope.store.store import Store
from tests.fakes import fake_generation, fake_target

PG_URL = os.environ.get("LENSCOPE_TEST_PG_URL")


def test_older_schema_is_migrated_not_crashed(data_dir):
    data_dir.mkdir(parents=True)
    db = sqlite3.connect(data_dir / "lenscope.db")
    db.executescript("""
        CREATE TABLE meta (key VARCHAR(64) PRIMARY KEY, value VARCHAR(256));
        INSERT INTO meta VALUES ('schema_version', '0');
        CREATE TABLE prompts (id INTEGER PRIMARY KEY, content_hash VARCHAR(64) UNIQUE, text TEXT);
        INSERT INTO prompts (content_hash, text) VALUES ('abc', 'an old prompt');
    """)
    db.close()
    store = Store()
    assert "add column prompts.source" in store.migrations and "create table runs" in store.migrations
    assert f"schema version 0 -> {SCHEMA_VERSION}" in store.migrations
    assert store.ensure_prompt("a new prompt") == 2
    assert Store().migrations == []


def test_schema_1_token_rows_become_per_run_arrays(data_dir):
    from tests.fakes import fake_generation, fake_target

    store = Store()
    run_id = store.save_run(fake_target(), "an old run", fake_generation(3, 2))
    tokens = store.load_run(run_id).features.tokens
    db = sqlite3.connect(data_dir / "lenscope.db")
    db.executescript("""
        UPDATE meta SET value = '1' WHERE key = 'schema_version';
        UPDATE runs SET tokens = NULL;
        CREATE TABLE token_features (run_id INTEGER, position INTEGER, token_id INTEGER, token VARCHAR(256),
                                     generated BOOLEAN, entropy FLOAT, PRIMARY KEY (run_id, position));
    """)
    db.executemany("INSERT INTO token_features VALUES (?, ?, 0, ?, 0, 0.5)",
                   [(run_id, i, tok) for i, tok in reversed(list(enumerate(tokens)))])
    db.commit()
    db.close()
    migrated = Store()
    assert any("drop table token_features" in change for change in migrated.migrations)
    assert migrated.load_run(run_id).features.tokens == tokens
    with migrated.engine.connect() as conn:
        assert "token_features" not in conn.dialect.get_table_names(conn)
    assert Store().migrations == []


def test_newer_schema_is_refused_with_a_clear_error(data_dir):
    Store()
    db = sqlite3.connect(data_dir / "lenscope.db")
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(ValueError, match="newer than this lenscope"):
        Store()


def test_locked_database_gives_a_clear_error(data_dir, monkeypatch):
    store = Store()
    monkeypatch.setenv("LENSCOPE_DB_BUSY_TIMEOUT_MS", "200")
    blocked = Store()
    holder = sqlite3.connect(data_dir / "lenscope.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailableError, match="locked"):
            blocked.ensure_prompt("waiting")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.ensure_prompt("after the lock") == 1


def _writer(data_dir: str, worker: int, queue) -> None:
    os.environ["LENSCOPE_DATA_DIR"] = data_dir
    store = Store()
    target = fake_target()
    ids = []
    for i in range(12):
        shared = i % 2 == 0  # even prompts are written by both workers, odd ones by one each
        prompt = f"shared {i}" if shared else f"worker {worker} prompt {i}"
        gen = fake_generation(5, 3 + i, seed=i if shared else 100 * worker + i)
        ids.append(store.save_run(target, prompt, gen))
        store.add_to_dataset(store.ensure_dataset("both", store.ensure_model(target), {}), ids[-1], "chat")
    queue.put(ids)


def test_two_concurrent_clients_do_not_corrupt_the_store(data_dir):
    Store()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(data_dir), w, queue)) for w in (1, 2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    store = Store()
    assert [a for a, b in zip(*results) if a == b] == results[0][0::2]
    runs = store.runs_frame(dataset="both")
    assert len(runs) == 6 + 6 + 6
    with store.session() as s:
        for run in s.scalars(select(Run)):
            assert len(run.tokens) == run.prompt_tokens + run.output_tokens
    for run_id in runs["run_id"]:
        loaded = store.load_run(int(run_id))
        assert len(loaded.features) == loaded.prompt_len + loaded.output_length


@pytest.mark.skipif(not PG_URL, reason="LENSCOPE_TEST_PG_URL not set (.ci/run starts a local PostgreSQL)")
def test_store_on_postgresql(tmp_path):
    from sqlalchemy import text

    store = Store(url=PG_URL, tensor_dir=tmp_path / "tensors")
    with store.engine.begin() as conn:
        conn.execute(text("TRUNCATE runs, prompts, models, datasets, dataset_runs CASCADE"))
    target = fake_target("pg-model")
    run_id = store.save_run(target, "hello postgres", fake_generation(4, 6))
    assert store.save_run(target, "hello postgres", fake_generation(4, 6)) == run_id
    run = store.load_run(run_id)
    assert run.output_length == 6 and run.prompt == "hello postgres"
    store.put_result("k", "n", {"a": 1}, {"v": [1, 2]})
    assert store.get_result("k", {"a": 1}) == {"v": [1, 2]}


def test_sessions_storing_the_same_result_at_once_end_with_one_row(data_dir):
    from concurrent.futures import ThreadPoolExecutor

    Store()

    def put(k: int) -> int:
        return Store().put_result("simulation", "same run", {"trace": 1}, {"writer": k})

    with ThreadPoolExecutor(8) as pool:  # eight browser sessions running the same simulation
        ids = list(pool.map(put, range(32)))
    assert len(set(ids)) == 1 and len(Store().results_frame("simulation")) == 1


def test_clients_opening_a_new_store_at_the_same_moment_all_succeed(data_dir):
    """Every client creates the schema of a new store; those that lose the race to create a table retry."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    barrier = threading.Barrier(6)

    def open_store(_: int) -> list[str]:
        barrier.wait()
        return Store().migrations

    with ThreadPoolExecutor(6) as pool:
        changes = list(pool.map(open_store, range(6)))
    assert all(isinstance(c, list) for c in changes)
    assert Store().put_result("k", "n", {"a": 1}, {"b": 2}) > 0

