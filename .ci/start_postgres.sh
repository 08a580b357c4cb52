#!/usr/bin/env bash
# Start a throwaway PostgreSQL from Debian's package on loopback and print its SQLAlchemy URL.
# Usage: eval "$(.ci/start_postgres.sh)"  -> exports LENSCOPE_TEST_PG_URL and PG_DATA_DIR.
set -euo pipefail
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >&2
fi
bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
dir=$(mktemp -d /tmp/lenscope-pg.XXXXXX)
port=$((20000 + RANDOM % 20000))
chown postgres "$dir" 2>/dev/null || true
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_pg "$bin/initdb" -D "$dir/data" -U lenscope --auth=trust >&2
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >&2
as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U lenscope lenscope_test >&2
echo "export LENSCOPE_TEST_PG_URL=postgresql+psycopg2://lenscope@127.0.0.1:$port/lenscope_test"
echo "export PG_DATA_DIR=$dir/data PG_BIN=$bin"
