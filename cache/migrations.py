"""Recognise a lenscope store (and refuse another application's database), and bring an existing store's
database up to the current schema instead of failing on it."""

from __future__ import annotations

from sqlalchemy import Column, inspect, text
from sqlalchemy.engine import Connection, Engine

from lenscope.store.errors import NotAStoreError, StoreReadOnlyError
from lenscope.store.schema import SCHEMA_VERSION, Base, Meta

# The mark of a lenscope store: the row ``application = lenscope`` of its ``meta`` table.
APPLICATION = "lenscope"
# Tables of older schemas that a data migration drops (a store still at that schema holds them).
RETIRED_TABLES = frozenset({"token_features"})


def _default_sql(column: Column) -> str:
    """A DEFAULT clause for a column added to a table that may already hold rows."""
    default = column.default.arg if column.default is not None and not callable(column.default.arg) else None
    if default is None:
        return ""
    if isinstance(default, bool):
        return f" DEFAULT {'TRUE' if default else 'FALSE'}"
    if isinstance(default, (int, float)):
        return f" DEFAULT {default}"
    if isinstance(default, str):
        return " DEFAULT '{}'".format(default.replace("'", "''"))
    return ""


def _token_rows_to_arrays(conn, inspector) -> list[str]:
    """Schema 2: per-token rows of ``token_features`` become one JSON array per run (``runs.tokens``);
    entropy and top-k were always in the run's tensor file too. The old table is dropped afterwards."""
    if "token_features" not in inspector.get_table_names():
        return []
    rows = conn.execute(text("SELECT run_id, token FROM token_features ORDER BY run_id, position")).all()
    tokens: dict[int, list[str]] = {}
    for run_id, token in rows:
        tokens.setdefault(run_id, []).append(token)
    runs = Base.metadata.tables["runs"]
    for run_id, values in tokens.items():
        conn.execute(runs.update().where(runs.c.id == run_id).values(tokens=values))
    conn.execute(text("DROP TABLE token_features"))
    return [f"move {len(rows)} token rows of {len(tokens)} runs into runs.tokens, drop table token_features"]


DATA_MIGRATIONS = {2: _token_rows_to_arrays}


def _lock_schema(conn: Connection) -> None:
    """Hold the database's schema lock until the transaction ends, so that clients opening a new store at the
    same moment create its tables one after the other (not both, the loser failing on "already exists")."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('lenscope schema'))"))


def _meta(conn: Connection, inspector, names: list[str]) -> dict[str, str]:
    """The store's facts (application marker, schema version) in a ``meta`` table shaped like ours, else {}."""
    if "meta" not in names or not {"key", "value"} <= {c["name"] for c in inspector.get_columns("meta")}:
        return {}
    rows = conn.execute(text("SELECT key, value FROM meta WHERE key IN ('application', 'schema_version')")).all()
    return {str(key): str(value) for key, value in rows}


def recognise(conn: Connection, where: str) -> int | None:
    """The schema version of the lenscope store behind ``conn``, None for an empty database (no table or view:
    a new store). Ours is a database marked ``application = lenscope`` in its ``meta`` table, or (stores from
    before the mark) one with a schema version whose every table is lenscope's. Anything else is another
    application's database: :class:`NotAStoreError` naming ``where``, before anything is written to it."""
    inspector = inspect(conn)
    names = sorted(set(inspector.get_table_names()) | set(inspector.get_view_names()))
    if not names:
        return None
    facts = _meta(conn, inspector, names)
    version = facts.get("schema_version", "")
    if facts.get("application") == APPLICATION:
        return int(version) if version.isdigit() else 0
    if version.isdigit() and set(names) <= set(Base.metadata.tables) | RETIRED_TABLES:
        return int(version)
    listed = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    raise NotAStoreError(f"{where} is not a lenscope store (it holds tables {listed}); point LENSCOPE_DATA_DIR or "
                         "LENSCOPE_DB_URL at an empty folder or a lenscope store")


def _refuse_newer(version: int | None, where: str) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise ValueError(f"the store at {where} has schema version {version}, newer than this lenscope "
                         f"({SCHEMA_VERSION}): upgrade lenscope")


def _missing(conn: Connection) -> tuple[set[str], list[tuple]]:
    """Lenscope's tables the database lacks, and (table, column) of the columns its tables lack."""
    inspector = inspect(conn)
    existing = set(inspector.get_table_names())
    columns = []
    for table in Base.metadata.sorted_tables:
        if table.name in existing:
            present = {c["name"] for c in inspector.get_columns(table.name)}
            columns += [(table, column) for column in table.columns if column.name not in present]
    return {t.name for t in Base.metadata.sorted_tables} - existing, columns


def migrate(engine: Engine, where: str | None = None, read_only: bool = False) -> list[str]:
    """Check that the database is a lenscope store (:func:`recognise`; an empty one becomes one), then create
    missing tables, add missing columns (nullable, with their scalar default), run the data migrations of every
    newer schema version (:data:`DATA_MIGRATIONS`) and record the schema version, all in one transaction under
    the schema lock. Returns the changes made. A store written by a newer lenscope is refused. ``read_only``
    changes nothing: a store that would need a change is refused (:class:`StoreReadOnlyError`). ``where``
    names the store in messages (default: its URL without the password)."""
    where = where or engine.url.render_as_string(hide_password=True)
    with engine.connect() as conn:
        version = recognise(conn, where)
        _refuse_newer(version, where)
        if read_only:
            _check_current(conn, version, where)
            return []
        conn.rollback()
        if conn.dialect.name == "sqlite":  # persistent in the file: set once it is known to be ours
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            conn.commit()
        _lock_schema(conn)
        _refuse_newer(recognise(conn, where), where)  # again under the lock: another client may have been first
        changes = _migrate(conn)
        conn.commit()
    return changes


def _check_current(conn: Connection, version: int | None, where: str) -> None:
    """Refuse a read-only database that is no store yet, or whose schema is older than this lenscope's."""
    if version is None:
        raise StoreReadOnlyError(f"{where} is read-only and holds no lenscope store yet; point LENSCOPE_DATA_DIR at "
                                 "a writable folder (a new store is created there)")
    tables, columns = _missing(conn)
    if tables or columns or version < SCHEMA_VERSION:
        raise StoreReadOnlyError(f"the store {where} is read-only and was written by an older lenscope (schema "
                                 f"{version}; this one reads schema {SCHEMA_VERSION}): open it once with write "
                                 "access to upgrade it")


def _migrate(conn: Connection) -> list[str]:
    inspector = inspect(conn)
    existing_tables = set(inspector.get_table_names())
    missing_tables, missing_columns = _missing(conn)
    changes = [f"create table {t.name}" for t in Base.metadata.sorted_tables if t.name in missing_tables]
    Base.metadata.create_all(conn)
    for table, column in missing_columns:
        kind = column.type.compile(conn.dialect)
        conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}{_default_sql(column)}'))
        changes.append(f"add column {table.name}.{column.name}")
    row = conn.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).first()
    version = int(row[0]) if row else 0
    for step in sorted(v for v in DATA_MIGRATIONS if version < v <= SCHEMA_VERSION):
        changes += DATA_MIGRATIONS[step](conn, inspector)
    if row is None:
        conn.execute(Meta.__table__.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
    elif version < SCHEMA_VERSION:
        conn.execute(Meta.__table__.update().where(Meta.key == "schema_version")
                     .values(value=str(SCHEMA_VERSION)))
        changes.append(f"schema version {version} -> {SCHEMA_VERSION}")
    if conn.execute(text("SELECT value FROM meta WHERE key = 'application'")).first() is None:
        conn.execute(Meta.__table__.insert().values(key="application", value=APPLICATION))
        if existing_tables:
            changes.append("mark the database as a lenscope store")
    return changes
