import assert from "node:assert/strict";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

/** Errors the real server raises, classified by the store. */
describe("PostgreSQL inbox: real server errors", function () {
  let store: InboxStore;

  before(async function () {
    const url = await createTestDatabase("inbox_errors");
    store = createPostgresInboxStore({ url, preCheck: false });
    await store.migrate();
    const setup = createPostgresInboxStore({ url });
    await setup.process({ messageId: "setup", consumer: "setup" }, async (tx) => {
      await tx.query(`CREATE TABLE "Accounts" ("Id" int PRIMARY KEY, "Balance" int NOT NULL)`);
      await tx.query(`INSERT INTO "Accounts" VALUES (1, 100), (2, 100)`);
    });
    await setup.close();
  });

  after(async function () {
    await store?.close();
  });

  it("a deadlock between two messages fails one of them as transient; the other commits", async function () {
    let arrived = 0;
    let bothLocked!: () => void;
    const barrier = new Promise<void>((resolve) => (bothLocked = resolve));
    const transfer = (first: number, second: number) => async (tx: SqlExecutor) => {
      await tx.query(`UPDATE "Accounts" SET "Balance" = "Balance" - 1 WHERE "Id" = $1`, [first]);
      arrived += 1;
      if (arrived === 2) bothLocked();
      await barrier; // each holds its first row; now each reaches for the other's
      await tx.query(`UPDATE "Accounts" SET "Balance" = "Balance" + 1 WHERE "Id" = $1`, [second]);
    };
    const outcomes = await Promise.all([
      store.process({ messageId: "t-1", consumer: "bank" }, transfer(1, 2)),
      store.process({ messageId: "t-2", consumer: "bank" }, transfer(2, 1)),
    ]);
    const failed = outcomes.filter((o) => o.kind === "failed");
    assert.equal(failed.length, 1, JSON.stringify(outcomes.map((o) => o.kind)));
    assert.equal(failed[0]?.kind === "failed" && failed[0].errorClass, "transient");
    assert.equal((failed[0] as { error: { code?: string } }).error.code, "40P01");
    assert.equal(outcomes.filter((o) => o.kind === "committed").length, 1);
  });

  it("a handler that swallows a failed statement's error does not get a commit that wrote nothing", async function () {
    const key = { messageId: "swallowed", consumer: "c" };
    const outcome = await store.process(key, async (tx) => {
      await tx.query(`INSERT INTO "Accounts" VALUES (1, 0)`).catch(() => undefined); // duplicate key, swallowed
      await tx.query(`SELECT 1`).catch(() => undefined); // "current transaction is aborted", swallowed too
    });
    assert.equal(outcome.kind, "failed");
    assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
    assert.equal(await store.isProcessed(key), false);
    assert.equal((await store.process(key, () => Promise.resolve())).kind, "committed", "a retry succeeds");
  });

  it("the handler's own error is permanent; a duplicate marker is a duplicate", async function () {
    const key = { messageId: "h-1", consumer: "c" };
    const failed = await store.process(key, () => Promise.reject(new Error("handler bug")));
    assert.equal(failed.kind === "failed" && failed.errorClass, "permanent");
    assert.equal((await store.process(key, () => Promise.resolve())).kind, "committed");
    assert.equal((await store.process(key, () => Promise.resolve())).kind, "duplicate");
  });
  it("its own connection ended under a handler is unavailable, however the handler rethrows or wraps the error", async function () {
    const wrappings: Array<[string, (e: unknown) => unknown]> = [
      ["as is", (e) => e],
      ["new Error(msg, { cause })", (e) => new Error("could not record the order", { cause: e })],
      ["AggregateError", (e) => new AggregateError([e], "order failed")],
      // The handler keeps the statement's error to itself: the transaction still saw the outage.
      ["its own error, no cause", () => new Error("could not record the order")],
    ];
    for (const [label, wrap] of wrappings) {
      const outcome = await store.process({ messageId: `ended-${label}`, consumer: "c" }, async (tx) => {
        try {
          await tx.query("SELECT pg_terminate_backend(pg_backend_pid())");
        } catch (error) {
          throw wrap(error);
        }
      });
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "unavailable", label);
    }
  });

  it("a handler's own network error, however wrapped, is never an outage", async function () {
    const refused = () =>
      Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6379"), { code: "ECONNREFUSED" });
    const errors = [refused(), new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } })];
    for (const error of errors) {
      const outcome = await store.process({ messageId: `net-${error.name}`, consumer: "c" }, async (tx) => {
        await tx.query("SELECT 1");
        throw error;
      });
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent", error.message);
    }
  });
});

describe("PostgreSQL inbox: a handler's pause between statements", function () {
  let url: string;
  before(async () => {
    url = await createTestDatabase("idle_in_transaction");
  });

  it("may outlast the statement timeout, up to its own idle-in-transaction bound", async function () {
    this.timeout(30_000);
    const store = createPostgresInboxStore({
      url,
      timeouts: { connectMs: 2_000, statementMs: 500, idleInTransactionMs: 1_500, keepAliveMs: 1_000 },
    });
    try {
      await store.migrate();
      // The pause stands for a slow downstream call between two statements.
      const pausing = (ms: number) => async (tx: SqlExecutor) => {
        await tx.query("SELECT 1");
        await new Promise((resolve) => setTimeout(resolve, ms));
        await tx.query("SELECT 2");
      };
      const slowCall = await store.process({ messageId: "idle-1", consumer: "c" }, pausing(1_000));
      assert.equal(slowCall.kind, "committed", "a pause longer than a statement's bound is not cut short");
      const stalled = await store.process({ messageId: "idle-2", consumer: "c" }, pausing(3_000));
      assert.equal(stalled.kind, "failed", "a pause past the idle bound ends the transaction");
      assert.equal(
        stalled.kind === "failed" && stalled.errorClass,
        "transient",
        String((stalled as { error?: unknown }).error),
      );
    } finally {
      await store.close();
    }
  });
});
