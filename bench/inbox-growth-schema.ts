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

// PROPOSED, not yet a migration on this branch: the compact marker of issue 41 item 3 as helper i41s wrote it
// (its 0002_inbox_markers.sql and statements, copied here; /work/wt/i41-schema.md): the MessageId as a bytea key,
// 16 raw bytes for a canonical UUID; the consumer as a smallint of InboxConsumer; seconds since 2020 as an integer;
// no ReceivedUtc index (retention walks the primary key). When 0002 lands, read it from the migrations instead.
const COMPACT_DDL = [
  `CREATE TABLE "InboxConsumer" (
  "Id" smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  "Name" varchar(200) COLLATE "C" NOT NULL CONSTRAINT "UQ_InboxConsumer_Name" UNIQUE
)`,
  `CREATE TABLE "Inbox" (
  "Id" bigint GENERATED ALWAYS AS IDENTITY,
  "ReceivedSec" integer NOT NULL DEFAULT floor(extract(epoch FROM now()) - 1577836800)::integer,
  "ConsumerId" smallint NOT NULL,
  "MessageKey" bytea NOT NULL CONSTRAINT "CK_Inbox_MessageKey_Length" CHECK (octet_length("MessageKey") <= 386),
  "ClaimedUtc" timestamptz NULL,
  CONSTRAINT "Inbox_pkey" PRIMARY KEY ("Id") WITH (fillfactor = 100)
)`,
  `CREATE UNIQUE INDEX "IX_Inbox_MessageKey_ConsumerId" ON "Inbox" ("MessageKey", "ConsumerId")`,
  `CREATE INDEX "IX_Inbox_ClaimedUtc" ON "Inbox" ("ClaimedUtc") WHERE "ClaimedUtc" IS NOT NULL`,
];
const CONSUMER_ID = `(SELECT "Id" FROM "public"."InboxConsumer" WHERE "Name" = $2::varchar)`;

function schemaCompact(): SchemaUnderTest {
  let consumer = "";
  return {
    name: "compact (i41s's proposed 0002, embedded in bench/inbox-growth-schema.ts)",
    table: "Inbox",
    async setup(_url, admin, name) {
      consumer = name;
      for (const ddl of COMPACT_DDL) await admin.query(ddl);
      await admin.query(`INSERT INTO "InboxConsumer" ("Name") VALUES ($1)`, [name]);
    },
    insertSql: `INSERT INTO "public"."Inbox" ("ConsumerId", "MessageKey") VALUES (${CONSUMER_ID}, $1)`,
    isProcessedSql: `SELECT 1 AS found FROM "public"."Inbox"
WHERE "MessageKey" = $1 AND "ConsumerId" = ${CONSUMER_ID} AND "ClaimedUtc" IS NULL`,
    // A canonical UUID's key is its 16 bytes (i41s's src/inbox/message-key.ts); the bench's ids all are.
    params: (messageId) => [Buffer.from(messageId.replaceAll("-", ""), "hex"), consumer],
    fillSql: (idSql) => `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
SELECT (SELECT "Id" FROM "InboxConsumer" WHERE "Name" = '${consumer.replaceAll("'", "''")}'),
  decode(translate(${idSql}, '-', ''), 'hex'), floor(extract(epoch FROM ts) - 1577836800)::integer ${SERIES}`,
  };
}

export function schemaUnderTest(name: "0001" | "compact"): SchemaUnderTest {
  return name === "0001" ? schema0001() : schemaCompact();
}
