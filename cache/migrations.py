"""Bring an existing store's database up to the current schema instead of failing on it."""

from __future__ import annotations

from sqlalchemy import Column, inspect, text
from sqlalchemy.engine import Connection, Engine

from cache.schema import SCHEMA_VERSION, Base, Meta


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


def migrate(engine: Engine) -> list[str]:
    """Create missing tables, add missing columns (nullable, with their scalar default), run the data
    migrations of every newer schema version (:data:`DATA_MIGRATIONS`) and record the schema version, all in
    one transaction under the schema lock. Returns the changes made. A store written by a newer lenscope is
    refused."""
    with engine.connect() as conn:
        _lock_schema(conn)
        changes = _migrate(conn)
        conn.commit()
    return changes


def _migrate(conn: Connection) -> list[str]:
    inspector = inspect(conn)
    existing_tables = set(inspector.get_table_names())
    changes = [f"create table {t.name}" for t in Base.metadata.sorted_tables if t.name not in existing_tables]
    Base.metadata.create_all(conn)
    for table in Base.metadata.sorted_tables:
        if table.name not in existing_tables:
            continue
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(conn.dialect)
            conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'
                              f"{_default_sql(column)}"))
            changes.append(f"add column {table.name}.{column.name}")
    row = conn.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).first()
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise ValueError(f"the store at {conn.engine.url.render_as_string(hide_password=True)} has schema "
                         f"version {version}, newer than this lenscope ({SCHEMA_VERSION}): upgrade lenscope")
    for step in sorted(v for v in DATA_MIGRATIONS if version < v <= SCHEMA_VERSION):
        changes += DATA_MIGRATIONS[step](conn, inspector)
    if row is None:
        conn.execute(Meta.__table__.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
    elif version < SCHEMA_VERSION:
        conn.execute(Meta.__table__.update().where(Meta.key == "schema_version")
                     .values(value=str(SCHEMA_VERSION)))
        changes.append(f"schema version {version} -> {SCHEMA_VERSION}")
    return changes
