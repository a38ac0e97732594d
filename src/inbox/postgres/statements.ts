import type { InboxBatchStatements, InboxStatements, LegacyStatements } from "../core.ts";
import { checkSchemaName, DEFAULT_INBOX_SCHEMA } from "../schema-name.ts";

/** Every statement the PostgreSQL adapter sends, except the migration files themselves. */

/** The inbox's unique index; a 23505 naming it on the marker insert is the duplicate signal. */
export const INBOX_UNIQUE_INDEX = "IX_Inbox_MessageKey_ConsumerId";

/** ReceivedSec counts seconds from 2020-01-01 UTC, in Unix seconds. */
export const RECEIVED_EPOCH = 1577836800;

export const BEGIN = "BEGIN";
export const COMMIT = "COMMIT";
export const ROLLBACK = "ROLLBACK";

/** Any 64-bit constant unique to this purpose; held for the migration transaction only. */
export const MIGRATION_LOCK_KEY = "7021996410348201";
export const ACQUIRE_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock($1::bigint)";
/**
 * A session-level advisory lock by name (the cleanup's, one pass per inbox at a time), asked for without waiting;
 * the name is hashed to the lock's 64-bit key. Held until unlocked or until the session ends.
 */
export const TRY_SESSION_LOCK = "SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS held";
export const RELEASE_SESSION_LOCK = "SELECT pg_advisory_unlock(hashtextextended($1, 0)) AS released";
/** Asked before CREATE SCHEMA, which needs CREATE on the database even when the schema exists. */
export const SCHEMA_EXISTS = "SELECT 1 AS found FROM pg_namespace WHERE nspname = $1";
/**
 * The statements for an inbox in `schema` (validated, then double-quoted). The migration files name the inbox's
 * objects without a schema; the runner sets `search_path` to the configured schema for their transaction only.
 */
export function postgresSql(schema: string = DEFAULT_INBOX_SCHEMA.postgres) {
  const s = `"${checkSchemaName(schema)}"`;
  // The markers carry the consumer's 2-byte Id; every statement finds it by name, from the parameter given.
  const consumer = (name: string): string =>
    `(SELECT "Id" FROM ${s}."InboxConsumer" WHERE "Name" = ${name}::varchar)`;
  return {
    CREATE_SCHEMA: `CREATE SCHEMA IF NOT EXISTS ${s}`,
    // LOCAL: for the migration transaction only; the pool's other connections keep their own path.
    SET_MIGRATION_SEARCH_PATH: `SET LOCAL search_path TO ${s}`,
    CREATE_VERSION_TABLE: `CREATE TABLE IF NOT EXISTS ${s}."SbInboxSchemaVersion" (
  "Version" integer PRIMARY KEY,
  "Name" text NOT NULL,
  "AppliedUtc" timestamptz NOT NULL DEFAULT now()
)`,
    SELECT_APPLIED_VERSIONS: `SELECT "Version" AS version FROM ${s}."SbInboxSchemaVersion" ORDER BY "Version"`,
    RECORD_VERSION: `INSERT INTO ${s}."SbInboxSchemaVersion" ("Version", "Name") VALUES ($1, $2)`,
    // Handler modules' migrations create business tables where the worker's statements find them (the
    // connection's own search_path), not in the inbox's schema.
    RESET_MIGRATION_SEARCH_PATH: "SET LOCAL search_path TO DEFAULT",
    /** A handler module's own migrations (its business tables), one version track per module name. */
    CREATE_MODULE_VERSION_TABLE: `CREATE TABLE IF NOT EXISTS ${s}."SbInboxModuleVersion" (
  "Module" varchar(100) COLLATE "C" NOT NULL,
  "Version" integer NOT NULL,
  "Name" text NOT NULL,
  "AppliedUtc" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("Module", "Version")
)`,
    SELECT_MODULE_VERSIONS: `SELECT "Version" AS version FROM ${s}."SbInboxModuleVersion" WHERE "Module" = $1 ORDER BY "Version"`,
    RECORD_MODULE_VERSION: `INSERT INTO ${s}."SbInboxModuleVersion" ("Module", "Version", "Name") VALUES ($1, $2, $3)`,
    /** Read-only: which version tables exist, so a worker without DDL rights can tell "never migrated". */
    SELECT_VERSION_TABLES: `SELECT to_regclass('${s}."SbInboxSchemaVersion"') IS NOT NULL AS "inbox",
  to_regclass('${s}."SbInboxModuleVersion"') IS NOT NULL AS "module"`,
    statements: {
      // WHERE NOT EXISTS: the identity is drawn only for a name not there yet (ON CONFLICT alone would draw one on
      // every start, and a smallint lasts 32,767 draws); ON CONFLICT: two workers registering at once.
      registerConsumer: `INSERT INTO ${s}."InboxConsumer" ("Name") SELECT $1::varchar
WHERE NOT EXISTS (SELECT 1 FROM ${s}."InboxConsumer" WHERE "Name" = $1::varchar)
ON CONFLICT ("Name") DO NOTHING`,
      insertProcessedMarker: `INSERT INTO ${s}."Inbox" ("ConsumerId", "MessageKey") VALUES (${consumer("$2")}, $1)`,
      insertOpenClaim: `INSERT INTO ${s}."Inbox" ("ConsumerId", "MessageKey", "ClaimedUtc") VALUES (${consumer("$2")}, $1, now())
RETURNING "Id" AS id`,
      isProcessed: `SELECT 1 AS found FROM ${s}."Inbox"
WHERE "MessageKey" = $1 AND "ConsumerId" = ${consumer("$2")} AND "ClaimedUtc" IS NULL`,
      readMarker: `SELECT "Id" AS id, CASE WHEN "ClaimedUtc" IS NULL THEN 1 ELSE 0 END AS processed
FROM ${s}."Inbox" WHERE "MessageKey" = $1 AND "ConsumerId" = ${consumer("$2")}`,
      markProcessed: `UPDATE ${s}."Inbox" SET "ClaimedUtc" = NULL
WHERE "MessageKey" = $1 AND "ConsumerId" = ${consumer("$2")} AND "ClaimedUtc" IS NOT NULL`,
      markProcessedById: `UPDATE ${s}."Inbox" SET "ClaimedUtc" = NULL
WHERE "MessageKey" = $1 AND "ConsumerId" = ${consumer("$2")} AND "Id" = $3::bigint AND "ClaimedUtc" IS NOT NULL`,
      // A concurrent takeover of the same id waits on the row lock, then finds the row deleted: no row back. The
      // unique index lets the insert through because the row it would clash with is deleted by this statement.
      reenterClaim: `WITH gone AS (
  DELETE FROM ${s}."Inbox"
  WHERE "MessageKey" = $1 AND "ConsumerId" = ${consumer("$2")} AND "Id" = $3::bigint AND "ClaimedUtc" IS NOT NULL
  RETURNING "ConsumerId", "MessageKey"
)
INSERT INTO ${s}."Inbox" ("ConsumerId", "MessageKey", "ClaimedUtc")
SELECT "ConsumerId", "MessageKey", now() FROM gone RETURNING "Id" AS id`,
      releaseClaim: `DELETE FROM ${s}."Inbox"
WHERE "MessageKey" = $1 AND "ConsumerId" = ${consumer("$2")} AND "Id" = $3::bigint AND "ClaimedUtc" IS NOT NULL`,
      // The predicate is re-checked on each row as it is locked, so a claim closed meanwhile is left alone, and a
      // deleted claim can be inserted again by exactly one claimant (the unique index decides).
      sweepStaleClaims: `DELETE FROM ${s}."Inbox"
WHERE "ClaimedUtc" IS NOT NULL
  AND "ClaimedUtc" < now() - make_interval(secs => $1::bigint) - make_interval(secs => $2::integer / 1000.0)`,
      countOpenClaims: `SELECT count(*)::integer AS n FROM ${s}."Inbox" WHERE "ClaimedUtc" IS NOT NULL`,
      // cutoffSec: a marker of second s was received before s + 1, so s < cutoffSec is older than the retention.
      cleanupCutoff: `WITH c AS (
  SELECT now() - make_interval(secs => $1::bigint) - make_interval(secs => $2::integer / 1000.0) AS cutoff
)
SELECT cutoff, floor(extract(epoch FROM cutoff) - ${RECEIVED_EPOCH})::integer AS "cutoffSec" FROM c`,
      // One range of the primary key after the last Id of the batch before: the rows in it older than the cutoff
      // go. "old" counts them (a range with none ends the run) and "firstYoung" is the first Id kept, where the next
      // run starts; "high", the table's last Id, read from the key's end, paces the pass. The delete reads the
      // key's range, never a secondary index.
      cleanupBatch: `WITH range AS (
  SELECT "Id", "ReceivedSec" FROM ${s}."Inbox" WHERE "Id" > $1::bigint ORDER BY "Id" LIMIT $2::integer
), gone AS (
  DELETE FROM ${s}."Inbox"
  WHERE "Id" > $1::bigint AND "Id" <= (SELECT max("Id") FROM range) AND "ReceivedSec" < $3::integer
  RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::integer AS deleted, (SELECT max("Id") FROM range) AS last,
  (SELECT count(*) FROM range WHERE "ReceivedSec" < $3::integer)::integer AS old,
  (SELECT min("Id") FROM range WHERE "ReceivedSec" >= $3::integer) AS "firstYoung",
  (SELECT max("Id") FROM ${s}."Inbox") AS high`,
      ping: "SELECT 1 AS ok",
    } satisfies InboxStatements,
    // The table of the inbox before 0002, read while it still holds markers (docs/inbox.md, "Moving to 0002").
    legacy: {
      exists: `SELECT to_regclass('${s}."InboxLegacy"') IS NOT NULL AS found`,
      hasRows: `SELECT EXISTS (SELECT 1 FROM ${s}."InboxLegacy") AS found`,
      // [messageIds[], consumer]: { id, done } of each with a marker there (done: processed; else an open claim).
      processed: () => `SELECT "MessageId" AS id, "ProcessedUtc" IS NOT NULL AS done FROM ${s}."InboxLegacy"
WHERE "MessageId" = ANY($1::varchar[]) AND "Consumer" = $2`,
      // An open claim's time there is its ReceivedUtc (0001's sweeper read the same).
      sweepStaleClaims: `DELETE FROM ${s}."InboxLegacy"
WHERE "ProcessedUtc" IS NULL
  AND "ReceivedUtc" < now() - make_interval(secs => $1::bigint) - make_interval(secs => $2::integer / 1000.0)`,
      // [cutoff, batchSize]: its old retention statement, on its own ReceivedUtc index.
      cleanupBatch: `DELETE FROM ${s}."InboxLegacy" WHERE "Id" IN (
  SELECT "Id" FROM ${s}."InboxLegacy" WHERE "ReceivedUtc" < $1 ORDER BY "ReceivedUtc" LIMIT $2 FOR UPDATE SKIP LOCKED
)`,
    } satisfies LegacyStatements,
    // A batch's statements take the keys as one array, so one text serves every size. ON CONFLICT DO NOTHING
    // skips a key that exists and RETURNING names the rows inserted: the others are duplicates, decided without
    // an error. A concurrent insert of the same key not yet committed makes this wait for its end, as the
    // single-row insert does: it then skips (committed) or inserts (rolled back).
    batchStatements: {
      maxRows: 1000,
      arrays: true,
      returnsInserted: true,
      isProcessed: () => `SELECT "MessageKey" AS mkey FROM ${s}."Inbox"
WHERE "MessageKey" = ANY($1::bytea[]) AND "ConsumerId" = ${consumer("$2")} AND "ClaimedUtc" IS NULL`,
      // ORDER BY: batches that share keys take their key locks in one order, so they cannot deadlock on them.
      // The consumer's Id as a scalar subquery: an unregistered name gives null, refused (23502), never 0 rows.
      insertMarkers: () => `INSERT INTO ${s}."Inbox" ("ConsumerId", "MessageKey")
SELECT ${consumer("$2")}, k FROM unnest($1::bytea[]) AS k ORDER BY k
ON CONFLICT ("MessageKey", "ConsumerId") DO NOTHING RETURNING "MessageKey" AS mkey`,
      // For a batch of statements sent with its markers: a marker that exists fails the statement (23505 on the
      // inbox's index) and so the transaction, and none of the statements after it is applied.
      insertMarkersOrFail: () => `INSERT INTO ${s}."Inbox" ("ConsumerId", "MessageKey")
SELECT ${consumer("$2")}, k FROM unnest($1::bytea[]) AS k ORDER BY k`,
    } satisfies InboxBatchStatements,
  };
}

export const {
  CREATE_VERSION_TABLE,
  SELECT_APPLIED_VERSIONS,
  RECORD_VERSION,
  statements,
  batchStatements,
  legacy,
} = postgresSql();
