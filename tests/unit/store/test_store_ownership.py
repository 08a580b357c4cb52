"""Whose database is it: another application's is refused by every command with nothing written to it, a
read-only store opens for reading (a write fails with one line), and a dataset holds the runs of one model."""

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from lenscope.cli import main
from lenscope.store.errors import DatasetModelError, NotAStoreError, StoreReadOnlyError
from lenscope.store.store import Store
from tests.fakes import fake_generation, fake_target

REPO = Path(__file__).resolve().parents[3]


def _foreign_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
        INSERT INTO users (name) VALUES ('ada'), ('grace');
        CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER, total REAL);
    """)
    db.close()
    return path


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` with its bytes and modification time."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_error_line(err: str, command: str) -> str:
    """The one line of ``err`` besides progress bars (``collect`` opens its bar before the dataset is checked)."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"lenscope {command}: error: "), err
    return lines[0]


# another application's database ----------------------------------------------------------------------------
def test_a_database_of_another_application_is_refused_and_left_untouched(data_dir):
    db = _foreign_db(data_dir / "lenscope.db")
    before = _snapshot(data_dir)
    with pytest.raises(NotAStoreError) as info:
        Store()
    assert str(info.value) == (f"{db} is not a lenscope store (it holds tables orders, users); point "
                               "LENSCOPE_DATA_DIR or LENSCOPE_DB_URL at an empty folder or a lenscope store")
    assert _snapshot(data_dir) == before  # no table, no WAL switch, no -wal/-shm file, no tensors folder


@pytest.mark.parametrize("argv", [["doctor", "--fix"], ["doctor"], ["train-egtp"], ["export-generations",
                                                                                      "--dataset", "d", "--out", "x"]])
@pytest.mark.parametrize("how", ["LENSCOPE_DATA_DIR", "LENSCOPE_DB_URL"])
def test_every_command_refuses_it_with_one_line_and_writes_nothing(data_dir, tmp_path, monkeypatch, capsys, argv,
                                                                   how):
    if how == "LENSCOPE_DATA_DIR":
        db = _foreign_db(data_dir / "lenscope.db")
    else:
        db = _foreign_db(tmp_path / "crm" / "crm.sqlite")
        monkeypatch.setenv("LENSCOPE_DB_URL", f"sqlite:///{db}")
    argv = [str(tmp_path / a) if a == "x" else a for a in argv]
    before = _snapshot(db.parent)
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err, argv[0])
    assert line.endswith(f"error: {db} is not a lenscope store (it holds tables orders, users); point "
                         "LENSCOPE_DATA_DIR or LENSCOPE_DB_URL at an empty folder or a lenscope store")
    assert _snapshot(db.parent) == before
    assert not (tmp_path / "x").exists()


def test_a_foreign_meta_table_or_our_tables_beside_foreign_ones_are_not_a_store(data_dir):
    db = _foreign_db(data_dir / "lenscope.db")
    with sqlite3.connect(db) as conn:  # another application's own key/value table, even with a schema version
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    with pytest.raises(NotAStoreError, match=r"holds tables meta, orders, users\)"):
        Store()
    polluted = _foreign_db(data_dir / "polluted" / "app.db")  # what `doctor --fix` used to make of it
    Store(f"sqlite:///{data_dir / 'model' / 'lenscope.db'}")
    with sqlite3.connect(data_dir / "model" / "lenscope.db") as src, sqlite3.connect(polluted) as dst:
        for (sql,) in src.execute("SELECT sql FROM sqlite_master WHERE type = 'table'"):
            dst.execute(sql)
        dst.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    with pytest.raises(NotAStoreError, match=r"holds tables dataset_runs, datasets, meta, models, orders, predictions, "
                                             r"predictors, prompts, \.\.\.\)"):
        Store(f"sqlite:///{polluted}")


def test_an_empty_database_becomes_a_marked_store_and_an_unmarked_one_of_ours_is_marked(data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "lenscope.db").touch()  # an empty file is an empty SQLite database
    store = Store()
    assert "create table runs" in store.migrations
    with sqlite3.connect(data_dir / "lenscope.db") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'application'").fetchone() == ("lenscope",)
        conn.execute("DELETE FROM meta WHERE key = 'application'")  # a store from before the mark
        conn.execute("CREATE TABLE notes (id INTEGER)")
    with pytest.raises(NotAStoreError, match=r"holds tables .*notes"):  # unmarked, with a foreign table
        Store()
    with sqlite3.connect(data_dir / "lenscope.db") as conn:
        conn.execute("DROP TABLE notes")
    assert Store().migrations == ["mark the database as a lenscope store"]
    with sqlite3.connect(data_dir / "lenscope.db") as conn:
        conn.execute("CREATE TABLE notes (id INTEGER)")  # a marked store may hold a table of the user's own
    assert Store().migrations == []


# read-only stores -------------------------------------------------------------------------------------------
def _store_with_a_dataset(model_key: str = "model-a") -> tuple[Store, int]:
    store = Store()
    target = fake_target(model_key)
    run_id = store.save_run(target, "a prompt", fake_generation(3, 4))
    store.add_to_dataset(store.ensure_dataset("dev", target, {"layers": [1, 2]}), run_id, "chat")
    return store, run_id


@contextmanager
def _read_only(folder: Path, monkeypatch, whole_folder: bool = True):
    """Take the write bits off ``folder``'s files (and the folder itself with ``whole_folder``). Root ignores
    permission bits, so for root ``os.access`` answers from them, as it would for any other user (and as it does
    for root on a read-only file system)."""
    paths = [p for p in [folder, *folder.rglob("*")] if whole_folder or p.is_file()]
    modes = {p: p.stat().st_mode for p in paths}
    if os.geteuid() == 0:
        real_access = os.access

        def access(path, mode, *args, **kwargs):
            if mode & os.W_OK and os.path.exists(path) and not os.stat(path).st_mode & stat.S_IWUSR:
                return False
            return real_access(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)
    for p in sorted(paths, key=lambda p: -len(p.parts)):
        p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
    try:
        yield
    finally:
        for p in sorted(paths, key=lambda p: len(p.parts)):
            p.chmod(stat.S_IMODE(modes[p]))


def test_a_read_only_store_reads_and_refuses_writes_with_one_line(data_dir, tmp_path, monkeypatch, capsys):
    store, run_id = _store_with_a_dataset()
    store.engine.dispose()  # the last connection checkpoints the WAL and removes -wal and -shm
    before = _snapshot(data_dir)
    with _read_only(data_dir, monkeypatch):
        ro = Store()
        assert ro.read_only_reason == "the file is not writable"
        assert ro.datasets_frame()["name"].tolist() == ["dev"]
        assert ro.load_run(run_id).output_length == 4
        assert ro.runs_frame("dev")["run_id"].tolist() == [run_id]
        for write in (lambda: ro.ensure_prompt("a new prompt"), lambda: ro.save_run(fake_target("model-a"), "new",
                                                                                  fake_generation(2, 2, seed=5)),
                      lambda: ro.ensure_dataset("other", fake_target("model-a"), {}),
                      lambda: ro.put_result("kind", "name", {}, {})):
            with pytest.raises(StoreReadOnlyError, match=rf"^the store {data_dir / 'lenscope.db'} is read-only \(the "
                                                         r"file is not writable\): .* writes to it; make it writable"):
                write()
        assert main(["doctor"]) == 0
        out = capsys.readouterr().out
        assert "the store is healthy" in out and "opened read-only (the file is not writable)" in out
        assert main(["export-runs", "--dataset", "dev", "--out", str(tmp_path / "runs.csv")]) == 0
        assert (tmp_path / "runs.csv").is_file()
        capsys.readouterr()
        assert main(["doctor", "--fix"]) == 2
        line = _one_error_line(capsys.readouterr().err, "doctor")
        assert "is read-only (the file is not writable): doctor --fix writes to it" in line
        assert _snapshot(data_dir) == before  # immutable open in a read-only folder: no -wal, no -shm
    assert Store().ensure_prompt("writable again") > 0


def test_a_read_only_file_in_a_writable_folder_reads_too(data_dir, monkeypatch):
    store, run_id = _store_with_a_dataset()
    store.engine.dispose()
    with _read_only(data_dir, monkeypatch, whole_folder=False):
        ro = Store()
        assert ro.read_only and ro.load_run(run_id).output_length == 4
        with pytest.raises(StoreReadOnlyError, match="read-only"):
            ro.ensure_prompt("a new prompt")


def test_a_read_only_store_of_an_older_schema_asks_for_write_access_once(data_dir, monkeypatch):
    Store().engine.dispose()
    with sqlite3.connect(data_dir / "lenscope.db") as conn:
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with _read_only(data_dir, monkeypatch), pytest.raises(StoreReadOnlyError, match=r"read-only and was written by "
                                                                                    r"an older lenscope \(schema 2"):
        Store()


def _drop_permission_override() -> list[str] | None:
    """A command prefix that runs a process as root without the capabilities that ignore permission bits."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        return None
    return prefix


def test_real_permissions_read_only_store_from_the_command_line(data_dir, tmp_path):
    """Real permission bits (root runs without the capabilities that bypass them): reading commands work, a
    writing one fails with one line, and no file under the data folder changes."""
    prefix = _drop_permission_override()
    if prefix is None:
        pytest.skip("cannot drop root's permission override here (no setpriv)")
    store, _ = _store_with_a_dataset()
    store.engine.dispose()
    for p in sorted([data_dir, *data_dir.rglob("*")], key=lambda p: -len(p.parts)):
        p.chmod(stat.S_IMODE(p.stat().st_mode) & ~0o222)
    before = _snapshot(data_dir)
    env = {**os.environ, "LENSCOPE_DATA_DIR": str(data_dir), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("LENSCOPE_DB_URL", None)

    def lenscope(*argv):
        return subprocess.run([*prefix, sys.executable, "-m", "lenscope", *argv], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    try:
        listed = lenscope("export-runs", "--dataset", "dev", "--out", str(tmp_path / "runs.jsonl"))
        assert listed.returncode == 0, listed.stderr
        fix = lenscope("doctor", "--fix")
        assert fix.returncode == 2
        line = _one_error_line(fix.stderr, "doctor")
        assert "is read-only (the file is not writable): doctor --fix writes to it" in line
        assert _snapshot(data_dir) == before
    finally:
        for p in sorted([data_dir, *data_dir.rglob("*")], key=lambda p: len(p.parts)):
            p.chmod(stat.S_IMODE(p.stat().st_mode) | 0o200)


# one model per dataset --------------------------------------------------------------------------------------
def _other_model() -> SimpleNamespace:
    other = fake_target("model-b")
    other.source = SimpleNamespace(spec="embedded:gemma-3-270m-it", gguf_file=None)
    return other


MIXED = ("dataset 'dev' holds runs of fake; this collection uses embedded:gemma-3-270m-it: collect into another "
         "dataset (--dataset NAME)")


def _counts(store: Store) -> tuple:
    from sqlalchemy import func, select

    from lenscope.store.schema import ModelRecord

    with store.session() as s:
        return store.signature(), s.scalar(select(func.count()).select_from(ModelRecord))


def test_a_dataset_refuses_runs_of_a_second_model_before_anything_is_written(store):
    _store_with_a_dataset()
    before = _counts(store)
    with pytest.raises(DatasetModelError) as info:
        store.ensure_dataset("dev", _other_model(), {})
    assert str(info.value) == MIXED
    assert _counts(store) == before  # not even the second model's row
    model_b = store.ensure_model(_other_model())
    with pytest.raises(DatasetModelError, match="holds runs of fake; this collection uses embedded:gemma"):
        store.ensure_dataset("dev", model_b, {})
    same_spec = fake_target("model-c")
    same_spec.dtype = "bfloat16"
    with pytest.raises(DatasetModelError, match=r"holds runs of fake \(float32\); this collection uses fake "
                                                r"\(bfloat16\)"):
        store.ensure_dataset("dev", same_spec, {})
    assert store.ensure_dataset("elsewhere", _other_model(), {}) != store.dataset_id("dev")
    assert store.ensure_dataset("dev", fake_target("model-a"), {}) == store.dataset_id("dev")


def _no_generation(target):
    target.check_layers = lambda layers: [1, 2] if layers is None else list(layers)
    target.chat_ids = lambda *a: pytest.fail("a prompt was prepared for generation")
    target.features = lambda *a: pytest.fail("features were computed")
    return target


def test_collect_and_import_into_a_dataset_of_another_model_fail_at_once(store):
    from lenscope.analysis.data.prompts import PromptItem
    from lenscope.jobs.runs.collect import collect_dataset
    from lenscope.jobs.runs.generations import import_records
    from lenscope.models.engine import GenerationSettings

    _store_with_a_dataset()
    before = _counts(store)
    with pytest.raises(DatasetModelError, match=MIXED.replace("(", r"\(").replace(")", r"\)")):
        collect_dataset(store, _no_generation(_other_model()), "dev", [PromptItem("hi", "user", "", "chat")],
                        GenerationSettings(4))
    other = _no_generation(_other_model())
    other.chat_ids = lambda prompt, system_prompt: [1, 2, 3]
    header = {"format": "lenscope-generations/1", "dataset": "dev", "layers": [1, 2], "model": other.source.spec}
    record = {"prompt": "hi", "source": "user", "ref": "", "scenario": "chat", "settings": {"seed": 0},
              "prompt_ids": [1, 2, 3], "output_ids": [4, 5], "finished": True}
    with pytest.raises(DatasetModelError, match="holds runs of fake; this collection uses embedded:gemma"):
        import_records(store, other, "gen.jsonl.gz", header, [record], "dev")
    assert _counts(store) == before
    assert store.dataset_id("dev") is not None  # the existing dataset is kept


def test_the_collect_command_names_both_models_in_one_line(store, monkeypatch, capsys):
    from lenscope.analysis.data.prompts import PromptItem

    _store_with_a_dataset()
    before = _counts(store)
    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: _no_generation(_other_model()))
    monkeypatch.setattr("lenscope.analysis.data.prompts.sample_prompts",
                        lambda n, *a, **k: [PromptItem("hi", "user", "", "chat")] * n)
    assert main(["collect", "--dataset", "dev", "--n", "2", "--max-new-tokens", "4"]) == 2
    assert _one_error_line(capsys.readouterr().err, "collect") == f"lenscope collect: error: {MIXED}"
    assert _counts(store) == before


@pytest.mark.skipif(not os.environ.get("LENSCOPE_TEST_PG_URL"),
                    reason="LENSCOPE_TEST_PG_URL not set (.ci/run starts a local PostgreSQL)")
def test_a_postgresql_database_of_another_application_is_refused(tmp_path):
    import uuid

    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.engine import make_url

    server = make_url(os.environ["LENSCOPE_TEST_PG_URL"])
    name = f"foreign_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    url = server.set(database=name)
    try:
        foreign = create_engine(url)
        with foreign.begin() as conn:
            conn.execute(text("CREATE TABLE users (id SERIAL PRIMARY KEY, name TEXT)"))
        with pytest.raises(NotAStoreError, match=r"lenscope@127.0.0.1:\d+/foreign_\w+ is not a lenscope store \(it "
                                                 r"holds tables users\)"):
            Store(url.render_as_string(hide_password=False), tmp_path / "tensors")
        with foreign.connect() as conn:
            assert inspect(conn).get_table_names() == ["users"]
        with foreign.begin() as conn:
            conn.execute(text("DROP TABLE users"))
        assert "create table runs" in Store(url.render_as_string(hide_password=False), tmp_path / "t").migrations
        foreign.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
