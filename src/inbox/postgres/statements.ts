import type { InboxBatchStatements, InboxStatements } from "../core.ts";
import { checkSchemaName, DEFAULT_INBOX_SCHEMA } from "../schema-name.ts";

/** Every statement the PostgreSQL adapter sends, except the migration files themselves. */

/** The inbox's unique index; a 23505 naming it on the marker insert is the duplicate signal. */
export const INBOX_UNIQUE_INDEX = "IX_Inbox_MessageId_Consumer";

export const BEGIN = "BEGIN";
export const COMMIT = "COMMIT";
export const ROLLBACK = "ROLLBACK";

/** Any 64-bit constant unique to this purpose; held for the migration transaction only. */
export const MIGRATION_LOCK_KEY = "7021996410348201";
export const ACQUIRE_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock($1::bigint)";
/** Asked before CREATE SCHEMA, which needs CREATE on the database even when the schema exists. */
export const SCHEMA_EXISTS = "SELECT 1 AS found FROM pg_namespace WHERE nspname = $1";
/**
 * The statements for an inbox in `schema` (validated, then double-quoted). The migration files name the inbox's
 * objects without a schema; the runner sets `search_path` to the configured schema for their transaction only.
 */
export function postgresSql(schema: string = DEFAULT_INBOX_SCHEMA.postgres) {
  const s = `"${checkSchemaName(schema)}"`;
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
      insertProcessedMarker: `INSERT INTO ${s}."Inbox" ("MessageId", "Consumer", "ProcessedUtc") VALUES ($1, $2, now())`,
      insertOpenClaim: `INSERT INTO ${s}."Inbox" ("MessageId", "Consumer") VALUES ($1, $2) RETURNING "Id" AS id`,
      isProcessed: `SELECT 1 AS found FROM ${s}."Inbox" WHERE "MessageId" = $1 AND "Consumer" = $2 AND "ProcessedUtc" IS NOT NULL`,
      readMarker: `SELECT "Id" AS id, CASE WHEN "ProcessedUtc" IS NULL THEN 0 ELSE 1 END AS processed
FROM ${s}."Inbox" WHERE "MessageId" = $1 AND "Consumer" = $2`,
      markProcessed: `UPDATE ${s}."Inbox" SET "ProcessedUtc" = now()
WHERE "MessageId" = $1 AND "Consumer" = $2 AND "ProcessedUtc" IS NULL`,
      markProcessedById: `UPDATE ${s}."Inbox" SET "ProcessedUtc" = now()
WHERE "MessageId" = $1 AND "Consumer" = $2 AND "Id" = $3::bigint AND "ProcessedUtc" IS NULL`,
      // A concurrent takeover of the same id waits on the row lock, then finds the row deleted: no row back. The
      // unique index lets the insert through because the row it would clash with is deleted by this statement.
      reenterClaim: `WITH gone AS (
  DELETE FROM ${s}."Inbox"
  WHERE "MessageId" = $1 AND "Consumer" = $2 AND "Id" = $3::bigint AND "ProcessedUtc" IS NULL
  RETURNING "MessageId", "Consumer"
)
INSERT INTO ${s}."Inbox" ("MessageId", "Consumer") SELECT "MessageId", "Consumer" FROM gone RETURNING "Id" AS id`,
      releaseClaim: `DELETE FROM ${s}."Inbox"
WHERE "MessageId" = $1 AND "Consumer" = $2 AND "Id" = $3::bigint AND "ProcessedUtc" IS NULL`,
      // The predicate is re-checked on each row as it is locked, so a claim closed meanwhile is left alone, and a
      // deleted claim can be inserted again by exactly one claimant (the unique index decides).
      sweepStaleClaims: `DELETE FROM ${s}."Inbox"
WHERE "ProcessedUtc" IS NULL
  AND "ReceivedUtc" < now() - make_interval(secs => $1::bigint) - make_interval(secs => $2::integer / 1000.0)`,
      countOpenClaims: `SELECT count(*)::integer AS n FROM ${s}."Inbox" WHERE "ProcessedUtc" IS NULL`,
      cleanupCutoff: `SELECT now() - make_interval(secs => $1::bigint) - make_interval(secs => $2::integer / 1000.0) AS cutoff`,
      // SKIP LOCKED: rows another session holds are left for the next run instead of waited on.
      cleanupBatch: `DELETE FROM ${s}."Inbox" WHERE "Id" IN (
  SELECT "Id" FROM ${s}."Inbox" WHERE "ReceivedUtc" < $1 ORDER BY "ReceivedUtc" LIMIT $2 FOR UPDATE SKIP LOCKED
)`,
      ping: "SELECT 1 AS ok",
    } satisfies InboxStatements,
    // A batch's statements take the ids as one array, so one text serves every size. ON CONFLICT DO NOTHING
    // skips a key that exists and RETURNING names the rows inserted: the others are duplicates, decided without
    // an error. A concurrent insert of the same key not yet committed makes this wait for its end, as the
    // single-row insert does: it then skips (committed) or inserts (rolled back).
    batchStatements: {
      maxRows: 1000,
      arrays: true,
      returnsInserted: true,
      isProcessed: () => `SELECT "MessageId" AS id FROM ${s}."Inbox"
WHERE "MessageId" = ANY($1::varchar[]) AND "Consumer" = $2 AND "ProcessedUtc" IS NOT NULL`,
      // ORDER BY: batches that share keys take their key locks in one order, so they cannot deadlock on them.
      insertMarkers: () => `INSERT INTO ${s}."Inbox" ("MessageId", "Consumer", "ProcessedUtc")
SELECT m, $2, now() FROM unnest($1::varchar[]) AS m ORDER BY m
ON CONFLICT ("MessageId", "Consumer") DO NOTHING RETURNING "MessageId" AS id`,
      // For a batch of statements sent with its markers: a marker that exists fails the statement (23505 on the
      // inbox's index) and so the transaction, and none of the statements after it is applied.
      insertMarkersOrFail: () => `INSERT INTO ${s}."Inbox" ("MessageId", "Consumer", "ProcessedUtc")
SELECT m, $2, now() FROM unnest($1::varchar[]) AS m ORDER BY m`,
    } satisfies InboxBatchStatements,
  };
}

export const { CREATE_VERSION_TABLE, SELECT_APPLIED_VERSIONS, RECORD_VERSION, statements, batchStatements } =
  postgresSql();
