import assert from "node:assert/strict";
import type { Socket } from "node:net";
import pg from "pg";
import { createPostgresInboxStore, PostgresDriver } from "../../src/inbox/postgres/adapter.ts";
import { postgresPoolConfig } from "../../src/inbox/postgres/pool.ts";
import { statements } from "../../src/inbox/postgres/statements.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

const consumer = "credit";

/**
 * What one pooled connection's socket did, in order: `w:<operation>` (with ` Inbox` when it names the inbox) for
 * each query pg wrote (a simple query or a Parse), `r` for each chunk the server sent back. The socket is the real one; only its writes are
 * watched.
 */
function watch(pool: pg.Pool): string[] {
  const events: string[] = [];
  pool.on("connect", (client) => {
    const stream = (client as unknown as { connection: { stream: Socket } }).connection.stream;
    const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    stream.write = (chunk: unknown, ...rest: unknown[]) => {
      if (Buffer.isBuffer(chunk) && (chunk[0] === 0x51 || chunk[0] === 0x50)) {
        // 'Q' (simple query): text at byte 5; 'P' (Parse): a statement name, then the text.
        const text = chunk
          .subarray(5)
          .toString("utf8")
          .replace(/^[^\0]*\0(?=\w)/, "");
        const operation = /^\s*(\w+)/.exec(text)?.[1] ?? "?";
        events.push(`w:${operation}${text.includes('"Inbox"') ? " Inbox" : ""}`);
      }
      return write(chunk, ...rest);
    };
    stream.on("data", () => events.push("r"));
  });
  return events;
}

describe("PostgreSQL: BEGIN goes out with the transaction's first statement", function () {
  this.timeout(60_000);
  let url: string;
  const stores: InboxStore[] = [];
  const pools: pg.Pool[] = [];

  before(async () => {
    url = await createTestDatabase("inbox_pipeline");
    const setup = createPostgresInboxStore({ url, maxConnections: 1 });
    stores.push(setup);
    await setup.migrate();
  });
  after(async () => {
    for (const store of stores) await store.close();
    for (const pool of pools) await pool.end();
  });

  function storeOn(pipeline: boolean): { store: InboxStore; events: string[] } {
    const pool = new pg.Pool({ ...postgresPoolConfig(url, 1), pipeline });
    pools.push(pool);
    const events = watch(pool);
    const store = createPostgresInboxStore({ pool, preCheck: false });
    stores.push(store);
    return { store, events };
  }

  /** The events from the BEGIN write on (the connection's start-up exchange left out). */
  function fromBegin(events: string[]): string[] {
    const begin = events.indexOf("w:BEGIN");
    assert.ok(begin >= 0, `no BEGIN written: ${events.join(", ")}`);
    return events.slice(begin);
  }

  it("on the store's own pool (pipeline on): BEGIN and the marker insert leave before the server answers", async function () {
    assert.equal(postgresPoolConfig(url, 1).pipeline, true, "the pool the store builds pipelines");
    const { store, events } = storeOn(true);
    const outcome = await store.process({ messageId: "p-1", consumer }, async (tx) => {
      await tx.query("SELECT 1");
    });
    assert.equal(outcome.kind, "committed");
    const seen = fromBegin(events);
    assert.deepEqual(seen.slice(0, 2), ["w:BEGIN", "w:INSERT Inbox"], seen.join(", "));
    // One round trip for both, then the handler's statement, then COMMIT: three answers in all.
    assert.deepEqual(
      seen.filter((e) => e.startsWith("w:")),
      ["w:BEGIN", "w:INSERT Inbox", "w:SELECT", "w:COMMIT"],
    );
    const answersBeforeHandler = seen.slice(0, seen.indexOf("w:SELECT")).filter((e) => e === "r").length;
    assert.ok(answersBeforeHandler >= 1, seen.join(", "));
  });

  it("on a pool without pipelining: BEGIN waits for its answer, and the outcome is the same", async function () {
    const { store, events } = storeOn(false);
    const outcome = await store.process({ messageId: "p-2", consumer }, async (tx) => {
      await tx.query("SELECT 1");
    });
    assert.equal(outcome.kind, "committed");
    const seen = fromBegin(events);
    assert.deepEqual(seen.slice(0, 3), ["w:BEGIN", "r", "w:INSERT Inbox"], seen.join(", "));
  });

  it("a marker that exists is a duplicate, the effect rolled back, and the connection serves the next message", async function () {
    const { store } = storeOn(true);
    let ran = 0;
    const work = async (tx: { query: (sql: string) => Promise<unknown> }) => {
      ran += 1;
      await tx.query("SELECT 1");
    };
    assert.equal((await store.process({ messageId: "p-3", consumer }, work)).kind, "committed");
    // No pre-check on this store: the marker insert, sent with BEGIN, meets the unique index.
    assert.equal((await store.process({ messageId: "p-3", consumer }, work)).kind, "duplicate");
    assert.equal(ran, 1, "the duplicate's work never ran");
    assert.equal((await store.process({ messageId: "p-4", consumer }, work)).kind, "committed");
    assert.equal(ran, 2);
  });

  it("a connection that dies before BEGIN is sent fails the first statement, and nothing is written", async function () {
    const pool = new pg.Pool(postgresPoolConfig(url, 1));
    pools.push(pool);
    const driver = new PostgresDriver({ pool });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      // begin() only takes a connection: BEGIN waits for the first statement. End that connection now.
      const tx = await driver.begin();
      const ended = await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
      );
      assert.ok((ended.rowCount ?? 0) >= 1);
      const error = await tx.query(statements.insertProcessedMarker, ["p-6", consumer]).then(
        () => assert.fail("the marker insert ran on an ended connection"),
        (e: unknown) => e,
      );
      await tx.rollback();
      assert.equal(driver.classify(error, "marker"), "unavailable", String(error));
      const found = await admin.query(`SELECT 1 FROM "InboxMarkers" WHERE "MessageId" = 'p-6'`);
      assert.equal(found.rowCount, 0, "no marker without its transaction");
      // The pool replaces the ended connection: the next transaction commits.
      const next = createPostgresInboxStore({ pool, preCheck: false });
      assert.equal((await next.process({ messageId: "p-7", consumer }, async () => {})).kind, "committed");
    } finally {
      await admin.end();
    }
  });

  it("without pipelining, a ROLLBACK given while BEGIN is out still rolls the first statement back", async function () {
    const pool = new pg.Pool({ ...postgresPoolConfig(url, 1), pipeline: false });
    pools.push(pool);
    const driver = new PostgresDriver({ pool });
    const tx = await driver.begin();
    // Not awaited: the rollback is given while BEGIN is still on its way.
    const marker = tx.query(statements.insertProcessedMarker, ["p-8", consumer]);
    await tx.rollback();
    await marker;
    const found = await pool.query(`SELECT 1 FROM "InboxMarkers" WHERE "MessageId" = 'p-8'`);
    assert.equal(found.rowCount, 0, "the marker went in inside the transaction and was rolled back");
  });

  it("without pipelining, a COMMIT given while BEGIN is out commits the first statement inside the transaction", async function () {
    const pool = new pg.Pool({ ...postgresPoolConfig(url, 1), pipeline: false });
    pools.push(pool);
    const driver = new PostgresDriver({ pool });
    const tx = await driver.begin();
    // Not awaited: the commit is given while BEGIN is still on its way; it must not overtake the statement.
    const inside = tx.query<{ intx: boolean }>("SELECT now() < statement_timestamp() AS intx");
    await tx.commit();
    assert.equal((await inside).rows[0]?.intx, true, "the statement ran after BEGIN, inside the transaction");
  });
});
