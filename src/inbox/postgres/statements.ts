import type { InboxStatements } from "../core.ts";

/** Every statement the PostgreSQL adapter sends, except the migration files themselves. */

/** The inbox's unique index; a 23505 naming it on the marker insert is the duplicate signal. */
export const INBOX_UNIQUE_INDEX = "IX_Inbox_MessageId_Consumer";

export const BEGIN = "BEGIN";
export const COMMIT = "COMMIT";
export const ROLLBACK = "ROLLBACK";

/** Any 64-bit constant unique to this purpose; held for the migration transaction only. */
export const MIGRATION_LOCK_KEY = "7021996410348201";
export const ACQUIRE_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock($1::bigint)";
export const CREATE_VERSION_TABLE = `CREATE TABLE IF NOT EXISTS "SbInboxSchemaVersion" (
  "Version" integer PRIMARY KEY,
  "Name" text NOT NULL,
  "AppliedUtc" timestamptz NOT NULL DEFAULT now()
)`;
export const SELECT_APPLIED_VERSIONS = `SELECT "Version" AS version FROM "SbInboxSchemaVersion" ORDER BY "Version"`;
export const RECORD_VERSION = `INSERT INTO "SbInboxSchemaVersion" ("Version", "Name") VALUES ($1, $2)`;

/** A handler module's own migrations (its business tables), one version track per module name. */
export const CREATE_MODULE_VERSION_TABLE = `CREATE TABLE IF NOT EXISTS "SbInboxModuleVersion" (
  "Module" varchar(100) COLLATE "C" NOT NULL,
  "Version" integer NOT NULL,
  "Name" text NOT NULL,
  "AppliedUtc" timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY ("Module", "Version")
)`;
export const SELECT_MODULE_VERSIONS = `SELECT "Version" AS version FROM "SbInboxModuleVersion" WHERE "Module" = $1 ORDER BY "Version"`;
export const RECORD_MODULE_VERSION = `INSERT INTO "SbInboxModuleVersion" ("Module", "Version", "Name") VALUES ($1, $2, $3)`;
/** Read-only: which version tables exist, so a worker without DDL rights can tell "never migrated". */
export const SELECT_VERSION_TABLES = `SELECT to_regclass('"SbInboxSchemaVersion"') IS NOT NULL AS "inbox",
  to_regclass('"SbInboxModuleVersion"') IS NOT NULL AS "module"`;

export const statements: InboxStatements = {
  insertProcessedMarker: `INSERT INTO "Inbox" ("MessageId", "Consumer", "ProcessedUtc") VALUES ($1, $2, now())`,
  insertOpenClaim: `INSERT INTO "Inbox" ("MessageId", "Consumer") VALUES ($1, $2) RETURNING "Id" AS id`,
  isProcessed: `SELECT 1 AS found FROM "Inbox" WHERE "MessageId" = $1 AND "Consumer" = $2 AND "ProcessedUtc" IS NOT NULL`,
  readMarker: `SELECT "Id" AS id, CASE WHEN "ProcessedUtc" IS NULL THEN 0 ELSE 1 END AS processed
FROM "Inbox" WHERE "MessageId" = $1 AND "Consumer" = $2`,
  markProcessed: `UPDATE "Inbox" SET "ProcessedUtc" = now()
WHERE "MessageId" = $1 AND "Consumer" = $2 AND "ProcessedUtc" IS NULL`,
  markProcessedById: `UPDATE "Inbox" SET "ProcessedUtc" = now()
WHERE "MessageId" = $1 AND "Consumer" = $2 AND "Id" = $3::bigint AND "ProcessedUtc" IS NULL`,
  // The predicate is re-checked on each row as it is locked, so a claim closed meanwhile is left alone, and a
  // deleted claim can be inserted again by exactly one claimant (the unique index decides).
  sweepStaleClaims: `DELETE FROM "Inbox"
WHERE "ProcessedUtc" IS NULL
  AND "ReceivedUtc" < now() - make_interval(secs => $1::bigint) - make_interval(secs => $2::integer / 1000.0)`,
  countOpenClaims: `SELECT count(*)::integer AS n FROM "Inbox" WHERE "ProcessedUtc" IS NULL`,
  cleanupCutoff: `SELECT now() - make_interval(secs => $1::bigint) - make_interval(secs => $2::integer / 1000.0) AS cutoff`,
  // SKIP LOCKED: rows another session holds are left for the next run instead of waited on.
  cleanupBatch: `DELETE FROM "Inbox" WHERE "Id" IN (
  SELECT "Id" FROM "Inbox" WHERE "ReceivedUtc" < $1 ORDER BY "ReceivedUtc" LIMIT $2 FOR UPDATE SKIP LOCKED
)`,
  ping: "SELECT 1 AS ok",
};
