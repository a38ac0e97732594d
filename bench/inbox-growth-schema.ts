// The inbox schemas bench/inbox-growth.ts can fill, both created from the project's migration files: the compact
// marker the worker writes today (0001 then 0002, through the store's migration runner) and the marker before 0002
// (0001 alone), for comparison.
import type pg from "pg";
import { loadMigrations } from "../src/inbox/migrations.ts";
import { createPostgresInboxStore, POSTGRES_MIGRATIONS_DIR } from "../src/inbox/postgres/adapter.ts";
import { RECEIVED_EPOCH, statements } from "../src/inbox/postgres/statements.ts";
import { messageKey } from "../src/inbox/message-key.ts";

export type KeyKind = "name" | "time";
export type SchemaName = "compact" | "0001";

export interface SchemaUnderTest {
  readonly name: string;
  readonly table: string;
  /** Creates the schema and whatever the markers refer to (the compact one's consumer row). */
  setup(url: string, admin: pg.Pool, consumer: string): Promise<void>;
  /** The worker's marker insert and duplicate check, and their parameters for one MessageId. */
  readonly insertSql: string;
  readonly isProcessedSql: string;
  params(messageId: string): unknown[];
  /** Inserts markers $1 .. $2-1 (received at $3 ms + g), ids from `idSql` over `g`, `r` and `h`. */
  fillSql(idSql: string): string;
}

const SERIES = `FROM generate_series($1::bigint, $2::bigint - 1) AS g,
LATERAL (SELECT md5(g::text) AS r, lpad(to_hex($3::bigint + g), 12, '0') AS h, to_timestamp(($3::bigint + g) / 1000.0) AS ts) AS x`;
const quoted = (s: string) => `'${s.replaceAll("'", "''")}'`;

/** The marker before 0002: migration 0001 alone, and the statements the worker sent to it then. */
function schema0001(): SchemaUnderTest {
  let consumer = "";
  return {
    name: "0001 (migrations/0001_inbox.sql alone, the marker before 0002)",
    table: "Inbox",
    async setup(_url, admin, name) {
      consumer = name;
      const first = (await loadMigrations(POSTGRES_MIGRATIONS_DIR)).find((m) => m.version === 1);
      if (first === undefined) throw new Error(`bench: no migration 0001 in ${POSTGRES_MIGRATIONS_DIR}`);
      await admin.query(first.sql);
    },
    // The worker's statements before 0002 (git show 81f72fb:src/inbox/postgres/statements.ts); no longer in src.
    insertSql: `INSERT INTO "public"."Inbox" ("MessageId", "Consumer", "ProcessedUtc") VALUES ($1, $2, now())`,
    isProcessedSql: `SELECT 1 AS found FROM "public"."Inbox" WHERE "MessageId" = $1 AND "Consumer" = $2 AND "ProcessedUtc" IS NOT NULL`,
    params: (messageId) => [messageId, consumer],
    fillSql: (idSql) => `INSERT INTO "Inbox" ("MessageId", "Consumer", "ReceivedUtc", "ProcessedUtc")
SELECT ${idSql}, ${quoted(consumer)}, ts, ts ${SERIES}`,
  };
}

/** The compact marker (0002): migrated as the worker migrates, written and read by the worker's statements. */
function schemaCompact(): SchemaUnderTest {
  let consumer = "";
  return {
    name: "compact (migrations 0001 + 0002_inbox_markers.sql, as the worker runs them)",
    table: "Inbox",
    async setup(url, admin, name) {
      consumer = name;
      const store = createPostgresInboxStore({ url, maxConnections: 1 });
      await store.migrate();
      await store.close();
      await admin.query(statements.registerConsumer, [name]);
    },
    insertSql: statements.insertProcessedMarker,
    isProcessedSql: statements.isProcessed,
    params: (messageId) => [messageKey(messageId), consumer],
    // A canonical UUID's key is its 16 bytes (src/inbox/message-key.ts); the bench's ids all are.
    fillSql: (idSql) => `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ReceivedSec")
SELECT (SELECT "Id" FROM "InboxConsumer" WHERE "Name" = ${quoted(consumer)}),
  decode(translate(${idSql}, '-', ''), 'hex'), floor(extract(epoch FROM ts) - ${RECEIVED_EPOCH})::integer ${SERIES}`,
  };
}

export function schemaUnderTest(name: SchemaName): SchemaUnderTest {
  return name === "0001" ? schema0001() : schemaCompact();
}
