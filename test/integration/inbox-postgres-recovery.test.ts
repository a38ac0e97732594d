import assert from "node:assert/strict";
import pg from "pg";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";

/** Its own server (not the shared one): this test stops and starts it. */
describe("PostgreSQL inbox: outages", function () {
  this.timeout(120_000);
  let server: EmbeddedPostgresServer;
  let store: InboxStore;
  let url: string;
  const idleErrors: Error[] = [];

  before(async function () {
    server = await EmbeddedPostgresServer.create();
    url = await server.createDatabase("inbox_outage");
    store = createPostgresInboxStore({ url, maxConnections: 4, onIdleError: (e) => idleErrors.push(e) });
    await store.migrate();
  });

  after(async function () {
    await store?.close();
    await server?.dispose();
  });

  const noop = (): Promise<void> => Promise.resolve();

  it("reports unavailable while the server is down and recovers when it is back", async function () {
    assert.equal((await store.process({ messageId: "before", consumer: "c" }, noop)).kind, "committed");
    await server.stop();
    const down = await store.process({ messageId: "during", consumer: "c" }, noop);
    assert.equal(down.kind, "failed");
    assert.equal(
      down.kind === "failed" && down.errorClass,
      "unavailable",
      String(down.kind === "failed" && down.error),
    );
    const ping = await store.ping().then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(ping instanceof Error, "ping must fail while the server is down");
    assert.equal(store.classify(ping), "unavailable");
    await server.start();
    await store.ping();
    assert.equal((await store.process({ messageId: "during", consumer: "c" }, noop)).kind, "committed");
    assert.ok(
      idleErrors.length >= 1,
      "the idle pooled connection's error reached the pool's handler, not the process",
    );
  });

  it("a connection killed mid-transaction is unavailable, and the next message gets a new connection", async function () {
    let pid = 0;
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    let proceed!: () => void;
    const resume = new Promise<void>((resolve) => (proceed = resolve));
    const outcome = store.process({ messageId: "killed", consumer: "c" }, async (tx: SqlExecutor) => {
      const { rows } = await tx.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      pid = rows[0]?.pid ?? 0;
      started();
      await resume;
      await tx.query("SELECT 1");
    });
    await running;
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      const { rows } = await admin.query<{ ok: boolean }>("SELECT pg_terminate_backend($1) AS ok", [pid]);
      assert.equal(rows[0]?.ok, true);
    } finally {
      await admin.end();
    }
    proceed();
    const result = await outcome;
    assert.equal(result.kind, "failed");
    assert.equal(
      result.kind === "failed" && result.errorClass,
      "unavailable",
      String(result.kind === "failed" && result.error),
    );
    assert.equal((await store.process({ messageId: "killed", consumer: "c" }, noop)).kind, "committed");
  });
});
