// `npm run bench:inbox-size`: bytes per marker on the embedded PostgreSQL, the schema before migration 0002
// against the one after it (issue 41, item 3). SBINBOX_BENCH_MARKERS markers (default 10,000, random UUID
// MessageIds as crypto.randomUUID and the publisher's name-based ids give) are written in batches of 32, the
// worker's way: through the store's batch path after 0002, through 0001's own batch insert before it. Then every
// table of the inbox with its indexes, by pg_total_relation_size, and each relation apart. A benchmark, not a test.
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { loadavg } from "node:os";
import pg from "pg";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { createPostgresInboxStore, POSTGRES_MIGRATIONS_DIR } from "../src/inbox/postgres/adapter.ts";
import { postgresSql } from "../src/inbox/postgres/statements.ts";
import { formatTable } from "./common.ts";

const MARKERS = Number(process.env.SBINBOX_BENCH_MARKERS ?? 10_000);
const BATCH = 32;
/** random: crypto.randomUUID; ordered: UUIDv7 (a millisecond time first), the order item 4 of issue 41 weighs. */
const IDS = process.env.SBINBOX_BENCH_IDS === "ordered" ? "ordered" : "random";
let sequence = 0;

/** A UUIDv7 as RFC 9562 lays it out: 48 bits of Unix milliseconds, the version, then random bits. */
function orderedUuid(): string {
  const hex = (BigInt(Date.now()) * 4096n + BigInt(sequence++ % 4096)).toString(16).padStart(15, "0");
  const rest = randomUUID().replaceAll("-", "").slice(15);
  const raw = `${hex.slice(0, 12)}7${hex.slice(12, 15)}${rest.slice(0, 16)}`;
  return `${raw.slice(0, 8)}-${raw.slice(8, 12)}-${raw.slice(12, 16)}-${raw.slice(16, 20)}-${raw.slice(20, 32)}`;
}

const newId = (): string => (IDS === "ordered" ? orderedUuid() : randomUUID());
const CONSUMER = "orders";
/** 0001's batch insert, as the worker sent it before 0002. */
const INSERT_0001 = `INSERT INTO "Inbox" ("MessageId", "Consumer", "ProcessedUtc")
SELECT m, $2, now() FROM unnest($1::varchar[]) AS m ORDER BY m
ON CONFLICT ("MessageId", "Consumer") DO NOTHING RETURNING "MessageId" AS id`;

const SIZES = `SELECT c.relname AS name, c.relkind AS kind, pg_total_relation_size(c.oid)::bigint AS total,
  pg_relation_size(c.oid)::bigint AS main
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') ORDER BY c.relkind DESC, c.relname`;

interface Size {
  name: string;
  kind: string;
  total: string;
  main: string;
}

async function measure(url: string): Promise<Size[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<Size>(SIZES)).rows;
  } finally {
    await client.end();
  }
}

async function before0002(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const sql = postgresSql();
    await client.query(sql.CREATE_VERSION_TABLE);
    await client.query(await readFile(join(POSTGRES_MIGRATIONS_DIR, "0001_inbox.sql"), "utf8"));
    await client.query(sql.RECORD_VERSION, [1, "0001_inbox"]);
    for (let done = 0; done < MARKERS; done += BATCH) {
      const ids = Array.from({ length: Math.min(BATCH, MARKERS - done) }, newId);
      await client.query(INSERT_0001, [ids, CONSUMER]);
    }
  } finally {
    await client.end();
  }
}

async function after0002(url: string): Promise<void> {
  const store = createPostgresInboxStore({ url, maxConnections: 2, preCheck: false });
  try {
    await store.migrate();
    for (let done = 0; done < MARKERS; done += BATCH) {
      const items = Array.from({ length: Math.min(BATCH, MARKERS - done) }, () => ({
        messageId: newId(),
        work: () => Promise.resolve(),
        firstDelivery: true,
      }));
      const result = await store.processBatch(CONSUMER, items);
      if (result.failure !== undefined)
        throw new Error("bench:inbox-size: a batch failed", { cause: result.failure });
    }
  } finally {
    await store.close();
  }
}

function report(label: string, sizes: readonly Size[]): number {
  const total = sizes.filter((s) => s.kind === "r").reduce((sum, s) => sum + Number(s.total), 0);
  console.log(
    `${label}: ${(total / MARKERS).toFixed(1)} bytes a marker (${total} bytes, every table with its indexes)`,
  );
  const rows = sizes.map((s) => [
    s.name,
    s.kind === "r" ? "table" : "index",
    String(s.kind === "r" ? s.total : s.main),
    (Number(s.kind === "r" ? s.main : s.main) / MARKERS).toFixed(1),
  ]);
  for (const line of formatTable(["relation", "kind", "bytes", "main fork / marker"], rows))
    console.log(`  ${line}`);
  return total;
}

async function main(): Promise<void> {
  const server = await EmbeddedPostgresServer.create();
  try {
    console.log(
      `bench:inbox-size: ${MARKERS} markers with ${IDS} UUIDs, batches of ${BATCH}, load ${loadavg()[0]!.toFixed(2)}`,
    );
    const old = await server.createDatabase("sbinbox_size_0001");
    await before0002(old);
    const a = report("0001 (before)", await measure(old));
    const now = await server.createDatabase("sbinbox_size_0002");
    await after0002(now);
    const b = report("0002 (after)", await measure(now));
    console.log(`after / before: ${(b / a).toFixed(3)} (target <= 0.5), load ${loadavg()[0]!.toFixed(2)}`);
  } finally {
    await server.dispose();
  }
}

await main();
