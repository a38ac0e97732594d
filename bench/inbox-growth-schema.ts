// The inbox schemas bench/inbox-growth.ts can fill: today's migration (0001, run as the worker runs it) and the
// proposed compact marker.
import type pg from "pg";
import { createPostgresInboxStore } from "../src/inbox/postgres/adapter.ts";
import { statements } from "../src/inbox/postgres/statements.ts";

export type KeyKind = "name" | "time";

export interface SchemaUnderTest {
  readonly name: string;
  readonly table: string;
  /** Creates the schema and whatever the markers refer to (the compact one's consumer row). */
  setup(url: string, admin: pg.Pool, consumer: string): Promise<void>;
  /** The worker's marker insert and duplicate check, and their parameters for one MessageId. */
  readonly insertSql: string;
  readonly isProcessedSql: string;
  params(messageId: string): unknown[];
  /** Inserts markers $1 .. $2-1 (ReceivedUtc $3 ms + g), ids from `idSql` over `g`, `r` and `h`. */
  fillSql(idSql: string): string;
}

const SERIES = `FROM generate_series($1::bigint, $2::bigint - 1) AS g,
LATERAL (SELECT md5(g::text) AS r, lpad(to_hex($3::bigint + g), 12, '0') AS h, to_timestamp(($3::bigint + g) / 1000.0) AS ts) AS x`;

/** Today's schema, created by the migration the worker runs. */
function schema0001(): SchemaUnderTest {
  let consumer = "";
  return {
    name: "0001 (migrations/0001_inbox.sql)",
    table: "Inbox",
    async setup(url, _admin, name) {
      consumer = name;
      const store = createPostgresInboxStore({ url, maxConnections: 1 });
      await store.migrate();
      await store.close();
    },
    insertSql: statements.insertProcessedMarker,
    isProcessedSql: statements.isProcessed,
    params: (messageId) => [messageId, consumer],
    fillSql: (idSql) => `INSERT INTO "Inbox" ("MessageId", "Consumer", "ReceivedUtc", "ProcessedUtc")
SELECT ${idSql}, '${consumer.replaceAll("'", "''")}', ts, ts ${SERIES}`,
  };
}

// PROPOSED, not a migration: the compact marker as issue 41 item 3 sketches it (a uuid MessageId in 16 bytes, the
// consumer as a smallint key, no ReceivedUtc index: retention by Id ranges). Replace with the migration's DDL and the
// adapter's statements once the compact schema lands (worktree i41s writes it to /work/wt/i41-schema.md).
const COMPACT_DDL = [
  `CREATE TABLE "InboxConsumer" (
  "Id" smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  "Name" varchar(200) COLLATE "C" NOT NULL UNIQUE
)`,
  `CREATE TABLE "InboxCompact" (
  "Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  "MessageKey" uuid NOT NULL,
  "ConsumerId" smallint NOT NULL,
  "ReceivedUtc" timestamptz NOT NULL DEFAULT now(),
  "ProcessedUtc" timestamptz NULL
)`,
  `CREATE UNIQUE INDEX "IX_InboxCompact_MessageKey_Consumer" ON "InboxCompact" ("MessageKey", "ConsumerId")`,
  `CREATE INDEX "IX_InboxCompact_OpenClaims" ON "InboxCompact" ("ReceivedUtc") WHERE "ProcessedUtc" IS NULL`,
];

function schemaCompact(): SchemaUnderTest {
  let consumerId = 0;
  return {
    name: "compact (proposed DDL embedded in bench/inbox-growth-schema.ts)",
    table: "InboxCompact",
    async setup(_url, admin, name) {
      for (const ddl of COMPACT_DDL) await admin.query(ddl);
      const r = await admin.query<{ id: number }>(
        `INSERT INTO "InboxConsumer" ("Name") VALUES ($1) RETURNING "Id" AS id`,
        [name],
      );
      consumerId = r.rows[0]!.id;
    },
    insertSql: `INSERT INTO "InboxCompact" ("MessageKey", "ConsumerId", "ProcessedUtc") VALUES ($1::uuid, $2, now())`,
    isProcessedSql: `SELECT 1 AS found FROM "InboxCompact" WHERE "MessageKey" = $1::uuid AND "ConsumerId" = $2 AND "ProcessedUtc" IS NOT NULL`,
    params: (messageId) => [messageId, consumerId],
    fillSql: (
      idSql,
    ) => `INSERT INTO "InboxCompact" ("MessageKey", "ConsumerId", "ReceivedUtc", "ProcessedUtc")
SELECT (${idSql})::uuid, ${consumerId}, ts, ts ${SERIES}`,
  };
}

export function schemaUnderTest(name: "0001" | "compact"): SchemaUnderTest {
  return name === "0001" ? schema0001() : schemaCompact();
}
