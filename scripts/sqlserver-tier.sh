#!/usr/bin/env bash
# The SQL Server tier of .ci/run: the product on a real TDS server (Babelfish for PostgreSQL, a test aid that the
# project's machines keep beside the checkout, never a dependency of the product).
#
#   scripts/sqlserver-tier.sh PATH/TO/babelfish/start.sh
#
# Starts a server of its own (its folder under a mktemp -d folder, a free port), runs the SQL Server conformance
# suites (inbox with its batches, transaction handle, clean-up, outbox) and the handler statement errors through the
# worker (test/integration/statement-faults-sqlserver.test.ts) in schema-per-run mode inside one database,
# then scripts/sqlserver-e2e.ts (sbinbox migrate twice, two workers with a fixture module,
# test/fixtures/orders-handlers, exactly once checked in the database). Stops the server at the end, also on failure
# or interruption. Tests the server cannot run (a feature it
# lacks, found by probing) are reported as skipped with the reason; the mocha line ends "N passed, N failed, N skipped".
set -euo pipefail
START=${1:?usage: scripts/sqlserver-tier.sh PATH/TO/start.sh}
[ -x "$START" ] || { echo "sqlserver-tier: $START is not an executable start.sh" >&2; exit 1; }
STOP=$(dirname "$START")/stop.sh
cd "$(dirname "$0")/.."
. .ci/node.sh
began=$SECONDS
work=$(mktemp -d)
dir=$work/babelfish
cleanup() {
  "$STOP" --dir "$dir" >/dev/null 2>&1 || echo "sqlserver-tier: could not stop the server in $dir" >&2
  rm -rf "$work"
}
trap cleanup EXIT
# Each step runs in a session of its own, waited for in the background, so that a signal to this script stops the
# step and every process it started (the end-to-end run's workers too), and then the server.
step=
on_signal() {
  [ -z "$step" ] || kill -- -"$step" 2>/dev/null || true
  exit 130
}
trap on_signal INT TERM
run() {
  local rc=0
  setsid "$@" &
  step=$!
  wait "$step" || rc=$?
  # Whatever the step left in its session (a worker, mocha's global PostgreSQL after a kill) ends with it.
  kill -- -"$step" 2>/dev/null || true
  step=
  return "$rc"
}

free_port() { node -e 'const s = require("node:net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'; }

# A port found free can be taken before the server binds it: try again with another.
cs=
for attempt in 1 2 3; do
  port=$(free_port)
  if cs=$("$START" --port "$port" --dir "$dir" 2>"$work/start.log" | tail -n1) && [ -n "$cs" ]; then break; fi
  cs=
  grep -q "in use" "$work/start.log" || break
done
if [ -z "$cs" ]; then
  cat "$work/start.log" >&2
  echo "sqlserver-tier: the TDS server did not start" >&2
  exit 1
fi
echo "sqlserver-tier: TDS server on 127.0.0.1:$port ($((SECONDS - began)) s)"

# One database, as a team's Azure SQL development database would be: each suite runs in a schema of its own there.
SBINBOX_TEST_MSSQL_SERVER=$cs node --input-type=module -e '
import mssql from "mssql";
const pool = await new mssql.ConnectionPool(process.env.SBINBOX_TEST_MSSQL_SERVER).connect();
await pool.request().batch("CREATE DATABASE sbinbox_ci");
await pool.close();'
# SBINBOX_TEST_POSTGRES=off: these files use SQL Server only, so mocha's global fixture starts no PostgreSQL.
SBINBOX_TEST_MSSQL="$cs;Database=sbinbox_ci" SBINBOX_TEST_POSTGRES=off run npx mocha \
  test/conformance/sqlserver.test.ts test/conformance/sqlserver-cleanup.test.ts test/conformance/outbox-sqlserver.test.ts \
  test/integration/statement-faults-sqlserver.test.ts
echo "sqlserver-tier: conformance suites done ($((SECONDS - began)) s)"
SBINBOX_TEST_MSSQL_SERVER=$cs run node scripts/sqlserver-e2e.ts
echo "sqlserver-tier: passed in $((SECONDS - began)) s"
