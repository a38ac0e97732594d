import type { OutboxStatements } from "../statements.ts";
import { OUTBOX_CHANNEL } from "../statements.ts";

/** Every statement the PostgreSQL outbox sends, except the migration files themselves. */

/** Any 64-bit constant unique to this purpose, other than the inbox's; held for the migration transaction only. */
export const MIGRATION_LOCK_KEY = "7021996410348202";
export const ACQUIRE_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock($1::bigint)";
export const CREATE_VERSION_TABLE = `CREATE TABLE IF NOT EXISTS "SbOutboxSchemaVersion" (
  "Version" integer PRIMARY KEY,
  "Name" text NOT NULL,
  "AppliedUtc" timestamptz NOT NULL DEFAULT now()
)`;
export const SELECT_APPLIED_VERSIONS = `SELECT "Version" AS version FROM "SbOutboxSchemaVersion" ORDER BY "Version"`;
export const RECORD_VERSION = `INSERT INTO "SbOutboxSchemaVersion" ("Version", "Name") VALUES ($1, $2)`;

export const LISTEN = `LISTEN ${OUTBOX_CHANNEL}`;

const UNSENT = `"SentUtc" IS NULL AND "SetAsideUtc" IS NULL`;
const COLUMNS = `o."Id" AS id, o."MessageId" AS "messageId", o."Type" AS type, o."Key" AS key, o."Body" AS body,
  o."Properties" AS properties, o."CorrelationId" AS "correlationId", o."TraceParent" AS "traceParent",
  o."TraceState" AS "traceState", o."Attempts" AS attempts, o."SessionId" AS "sessionId"`;

/** Not leased by another relay, and first tried inside the window ($3 ms): a row's own claim conditions. */
const FREE = (t: string) => `(${t}."LockedUntilUtc" IS NULL OR ${t}."LockedUntilUtc" <= now())
    AND (${t}."FirstAttemptUtc" IS NULL OR ${t}."FirstAttemptUtc" > now() - make_interval(secs => $3::bigint / 1000.0))`;

/**
 * The claim's candidates, from two indexes, so that no claim reads past a key's backlog:
 * - `plain`: rows without a session key, in Id order, from IX_Outbox_UnsentNoSession.
 * - `heads`: the head of each key, its lowest unsent Id (set aside and stale rows included, so that they hold
 *   their key's later rows back instead of letting them pass). A loose index scan of IX_Outbox_UnsentSession: one
 *   probe per key, whatever the key's backlog (not a look at each of its rows). It reads committed rows without
 *   SKIP LOCKED: a head another relay is claiming right now is still unsent, so its followers are no candidates.
 * `keyed` keeps the heads that are claimable themselves. Both lock with SKIP LOCKED (rows another relay is
 * claiming right now are left to it, not waited on) and recheck the row's conditions once locked, so a head marked
 * sent meanwhile is dropped. A key's next row becomes a head only once its head is marked sent, after the broker
 * took it. The lease then keeps the claimed rows from other relays while this one sends, and frees them if it dies.
 */
const CANDIDATES = `WITH RECURSIVE heads AS (
  (SELECT "SessionId" AS s, "Id" AS id FROM "Outbox"
   WHERE "SentUtc" IS NULL AND "SessionId" IS NOT NULL
   ORDER BY "SessionId", "Id" LIMIT 1)
  UNION ALL
  SELECT n.s, n.id FROM heads, LATERAL (
    SELECT "SessionId" AS s, "Id" AS id FROM "Outbox"
    WHERE "SentUtc" IS NULL AND "SessionId" IS NOT NULL AND "SessionId" > heads.s
    ORDER BY "SessionId", "Id" LIMIT 1) n
),
plain AS (
  SELECT "Id", "FirstAttemptUtc" IS NULL AS "firstTry" FROM "Outbox" h
  WHERE ${UNSENT} AND "SessionId" IS NULL AND ${FREE("h")}
  ORDER BY "Id" LIMIT $1
  FOR UPDATE SKIP LOCKED
),
keyed AS (
  SELECT h."Id", h."FirstAttemptUtc" IS NULL AS "firstTry" FROM heads JOIN "Outbox" h ON h."Id" = heads.id
  WHERE h."SentUtc" IS NULL AND h."SetAsideUtc" IS NULL AND ${FREE("h")}
  ORDER BY h."Id" LIMIT $1
  FOR UPDATE OF h SKIP LOCKED
),
c AS (
  SELECT * FROM plain UNION ALL SELECT * FROM keyed
  ORDER BY "Id" LIMIT $1
)`;

/**
 * The insert; without the SessionId column when no row of the call has a key (`withSession` false), so that an
 * enqueue without session keys still works on a database at migration 0001 (docs/outbox.md, Upgrading).
 */
function insertRows(withSession: boolean): string {
  const [sid, arr] = withSession ? [', "SessionId"', ", $9::text[]"] : ["", ""];
  return `INSERT INTO "Outbox" ("MessageId", "Type", "Key", "Body", "Properties", "CorrelationId", "TraceParent", "TraceState"${sid})
SELECT m, t, k, b, p, c, tp, ts${withSession ? ", sid" : ""}
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]${arr})
  WITH ORDINALITY AS u(m, t, k, b, p, c, tp, ts${withSession ? ", sid" : ""}, n)
ORDER BY n
RETURNING "Id" AS id`;
}

/** The insert of rows none of which has a session key (8 parameters). */
export const INSERT_ROWS_WITHOUT_SESSION = insertRows(false);

export const statements: OutboxStatements = {
  // One statement for any number of rows; ORDINALITY keeps the caller's order in the identity values.
  insertRows: insertRows(true),
  // Delivered at commit, dropped with a rollback: a relay wakes only for rows it can see.
  notify: `SELECT pg_notify('${OUTBOX_CHANNEL}', '')`,
  // CANDIDATES says how the rows are picked.
  claim: `${CANDIDATES}
UPDATE "Outbox" o
SET "Attempts" = o."Attempts" + 1,
  "FirstAttemptUtc" = coalesce(o."FirstAttemptUtc", now()),
  "LockedUntilUtc" = now() + make_interval(secs => $2::integer / 1000.0)
FROM c
-- The ids as an array too: the planner then reads o by its key, where it would scan the table for a hash join.
WHERE o."Id" = c."Id" AND o."Id" = ANY (ARRAY(SELECT "Id" FROM c))
RETURNING ${COLUMNS}, c."firstTry" AS "firstTry"`,
  markSent: `UPDATE "Outbox" SET "SentUtc" = now(), "LockedUntilUtc" = NULL WHERE "Id" = ANY($1::bigint[])`,
  release: `UPDATE "Outbox" SET "LockedUntilUtc" = now() + make_interval(secs => $2::integer / 1000.0),
  "FirstAttemptUtc" = CASE WHEN "Id" = ANY($3::bigint[]) THEN NULL ELSE "FirstAttemptUtc" END
WHERE "Id" = ANY($1::bigint[]) AND "SentUtc" IS NULL`,
  setAside: `UPDATE "Outbox" SET "SetAsideUtc" = now(), "Error" = $2, "LockedUntilUtc" = NULL WHERE "Id" = $1::bigint`,
  status: `SELECT
  coalesce((SELECT (extract(epoch FROM now() - "CreatedUtc") * 1000)::bigint FROM "Outbox" WHERE ${UNSENT} ORDER BY "Id" LIMIT 1), 0) AS "lagMs",
  (SELECT count(*)::integer FROM "Outbox" WHERE ${UNSENT}) AS unsent,
  (SELECT count(*)::integer FROM "Outbox" WHERE ${UNSENT}
     AND "FirstAttemptUtc" <= now() - make_interval(secs => $1::bigint / 1000.0)) AS stale,
  (SELECT count(*)::integer FROM "Outbox" WHERE "SetAsideUtc" IS NOT NULL) AS "setAside"`,
  cleanupBatch: `DELETE FROM "Outbox" WHERE "Id" IN (
  SELECT "Id" FROM "Outbox" WHERE "SentUtc" < now() - make_interval(secs => $1::bigint)
  ORDER BY "SentUtc" LIMIT $2 FOR UPDATE SKIP LOCKED
)`,
};
