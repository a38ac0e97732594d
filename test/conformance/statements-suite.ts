import assert from "node:assert/strict";
import { messageKey } from "../../src/inbox/message-key.ts";
import mssql from "mssql";
import { InboxCore, type InboxDriver, type InboxTransaction } from "../../src/inbox/core.ts";
import type { BoundStatement, InboxBatchItem, InboxKey, InboxStore } from "../../src/inbox/store.ts";
import { runStatements } from "../../src/inbox/batch-statements.ts";
import { scalar, type Backend, type BackendDatabase } from "./backends.ts";
import { skipFor } from "./guards.ts";

/**
 * What a driver was asked, counted on the client: `calls` every statement (and COMMIT) given to it, `turns` the
 * round trips, a turn being a call given while nothing else was in flight (what is given together goes together).
 */
interface Counted {
  readonly driver: InboxDriver;
  calls: number;
  turns: number;
  reset(): void;
}

function counting(driver: InboxDriver): Counted {
  let inFlight = 0;
  const counted = {
    calls: 0,
    turns: 0,
    reset() {
      counted.calls = 0;
      counted.turns = 0;
    },
  } as Counted & { driver: InboxDriver };
  const track = <T>(run: () => Promise<T>): Promise<T> => {
    counted.calls += 1;
    if (inFlight === 0) counted.turns += 1;
    inFlight += 1;
    return run().finally(() => {
      inFlight -= 1;
    });
  };
  const traceTx = (tx: InboxTransaction): InboxTransaction => ({
    query: (sql, params) => track(() => tx.query(sql, params)),
    commit: () => track(() => tx.commit()),
    rollback: () => tx.rollback(),
  });
  counted.driver = new Proxy(driver, {
    get(target, property, receiver) {
      if (property === "query")
        return (sql: string, params?: readonly unknown[]) => track(() => target.query(sql, params));
      if (property === "begin") return async () => traceTx(await target.begin());
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return counted;
}

/**
 * Undefined when the server tells the client of a transaction begun in T-SQL (ENVCHANGE "begin transaction", which
 * tedious keeps as `inTransaction`), as SQL Server does; otherwise why the guard built on it cannot be seen here.
 * Probed on a pool of one connection of its own, closed after (which ends the probe's transaction).
 */
async function tracksTextTransactions(db: BackendDatabase): Promise<string | undefined> {
  if (db.target.kind !== "sqlserver") return "not SQL Server";
  const pool = await new mssql.ConnectionPool({ ...db.target.config, pool: { max: 1 } }).connect();
  try {
    const tarn = (pool as unknown as { pool: { free: { resource: { inTransaction?: boolean } }[] } }).pool;
    await pool.request().batch("BEGIN TRANSACTION; SELECT 1 AS n;");
    return tarn.free[0]?.resource.inTransaction === true
      ? undefined
      : "the server sends no ENVCHANGE for a transaction begun in T-SQL (tedious's inTransaction stays false)";
  } finally {
    await pool.close();
  }
}

let counter = 0;
function key(consumer = "ledger"): InboxKey {
  counter += 1;
  return { messageId: `stm-${process.pid}-${counter}`, consumer };
}

/** The statements kind on a real database: one message, and batches of them, sent together. */
export function statementsConformance(backend: Backend): void {
  describe(`statements handlers' inbox paths: ${backend.name}`, function () {
    let db: BackendDatabase;
    let counted: Counted;
    let store: InboxCore;
    let nextOrder = 1_000;

    before(async function () {
      db = await backend.database(`statements_${backend.dialect}`);
      const migrating: InboxStore = db.createStore();
      await migrating.migrate();
      await db.raw.query(db.sql.createEffects);
      await db.raw.query(db.sql.createOrders);
      counted = counting(db.raw);
      // No pre-check read: first deliveries, as most are; the tests that need one make their own store.
      store = new InboxCore(counted.driver, { preCheck: false });
    });
    after(async () => db?.dispose());

    const effect = (k: InboxKey): BoundStatement => ({
      sql: db.sql.insertEffect,
      params: [k.messageId, k.consumer],
    });
    const order = (no: number): BoundStatement => ({ sql: db.sql.insertOrder, params: [no] });
    const effects = (k: InboxKey) => scalar(db.raw, db.sql.countEffects, [k.messageId]);
    const markers = (k: InboxKey) => scalar(db.raw, db.sql.countMarkers, [messageKey(k.messageId)]);
    const item = (k: InboxKey, statements: BoundStatement[]): InboxBatchItem => ({
      messageId: k.messageId,
      statements,
      firstDelivery: true,
      work: (tx) => runStatements(tx, statements),
    });

    it("one message: its marker and statements commit in one round trip", async () => {
      // Once per store and consumer, before its first message: the consumer's registration and the question
      // whether a legacy table (before migration 0002) is there. Not this message's round trips.
      const first = key();
      await store.process(first, () => Promise.resolve());
      const k = key();
      counted.reset();
      const outcome = await store.process(k, () => Promise.reject(new Error("work must not run")), {
        statements: [effect(k), effect(k), order((nextOrder += 1))],
      });
      assert.deepEqual(outcome, { kind: "committed" });
      assert.equal(counted.turns, 1, "round trips");
      assert.equal(await effects(k), 2);
      assert.equal(await markers(k), 1);
    });

    it("one message whose marker exists is a duplicate, and none of its statements is applied", async () => {
      const k = key();
      await store.process(k, () => Promise.resolve());
      const outcome = await store.process(k, () => Promise.reject(new Error("work must not run")), {
        statements: [effect(k)],
      });
      assert.deepEqual(outcome, { kind: "duplicate" });
      assert.equal(await effects(k), 0);
    });

    it("one message whose statement meets a business unique index fails permanently, not as a duplicate", async () => {
      const no = (nextOrder += 1);
      await db.raw.query(db.sql.insertOrder, [no]);
      const k = key();
      const outcome = await store.process(k, () => Promise.reject(new Error("work must not run")), {
        statements: [effect(k), order(no)],
      });
      assert.equal(outcome.kind, "failed");
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
      assert.equal(await effects(k), 0, "rolled back");
      assert.equal(await markers(k), 0, "no marker: the message can be retried");
    });

    it("a batch of statements items commits in one request", async () => {
      const keys = [key(), key(), key(), key(), key(), key(), key(), key()];
      counted.reset();
      const result = await store.processBatch(
        "ledger",
        keys.map((k) => item(k, [effect(k), order((nextOrder += 1))])),
      );
      assert.deepEqual(
        result.outcomes.map((o) => o.kind),
        keys.map(() => "committed"),
      );
      assert.equal(result.failure, undefined);
      // Every statement of the batch given together: one round trip for 8 messages (0.125 a message).
      assert.equal(counted.turns, 1, "round trips");
      for (const k of keys) {
        assert.equal(await effects(k), 1);
        assert.equal(await markers(k), 1);
      }
    });

    it("a batch with a message whose marker exists applies none of its statements; one by one the others commit once", async () => {
      const keys = [key(), key(), key()];
      await store.process(keys[1]!, () => Promise.resolve());
      const items = keys.map((k) => item(k, [effect(k), effect(k)]));
      const result = await store.processBatch("ledger", items);
      assert.equal(result.reason, "duplicate");
      assert.deepEqual(
        result.outcomes.map((o) => o.kind),
        ["single", "single", "single"],
      );
      for (const k of keys) assert.equal(await effects(k), 0, "the batch rolled back whole");
      // As the batcher does with `single`: each alone, on the single path.
      const alone = await Promise.all(items.map((it, i) => store.process(keys[i]!, it.work, it)));
      assert.deepEqual(
        alone.map((o) => o.kind),
        ["committed", "duplicate", "committed"],
      );
      assert.deepEqual(await Promise.all(keys.map(effects)), [2, 0, 2]);
    });

    it("a batch with a failing statement rolls back; alone, the others commit once and the failing one fails", async () => {
      const taken = (nextOrder += 1);
      await db.raw.query(db.sql.insertOrder, [taken]);
      const keys = [key(), key(), key()];
      const items = [
        item(keys[0]!, [effect(keys[0]!)]),
        item(keys[1]!, [effect(keys[1]!), order(taken)]),
        item(keys[2]!, [effect(keys[2]!)]),
      ];
      const result = await store.processBatch("ledger", items);
      assert.equal(result.reason, "handler_error");
      for (const k of keys) assert.equal(await effects(k), 0);
      const alone = await Promise.all(items.map((it, i) => store.process(keys[i]!, it.work, it)));
      assert.deepEqual(
        alone.map((o) => o.kind),
        ["committed", "failed", "committed"],
      );
      assert.equal(alone[1]!.kind === "failed" && alone[1]!.errorClass, "permanent");
      assert.deepEqual(await Promise.all(keys.map(effects)), [1, 0, 1]);
      assert.equal(await markers(keys[1]!), 0);
    });

    it("transaction control among the statements is never sent: alone it fails permanently, in a batch it goes alone", async () => {
      const [a, b] = [key(), key()];
      const commit: BoundStatement = { sql: "COMMIT", params: [] };
      const alone = await store.process(a, () => Promise.resolve(), { statements: [effect(a), commit] });
      assert.equal(alone.kind === "failed" && alone.errorClass, "permanent");
      const result = await store.processBatch("ledger", [item(a, [effect(a), commit]), item(b, [effect(b)])]);
      assert.equal(result.reason, "handler_error");
      assert.deepEqual(
        result.outcomes.map((o) => o.kind),
        ["single", "single"],
      );
      assert.deepEqual(await Promise.all([a, b].map(effects)), [0, 0]);
      assert.deepEqual(await Promise.all([a, b].map(markers)), [0, 0]);
    });

    /** Every pooled SQL Server connection is outside any transaction. */
    const noTransactionOpen = async (): Promise<void> => {
      const counts = await Promise.all(
        Array.from({ length: 8 }, () => scalar(db.raw, "SELECT @@TRANCOUNT AS n")),
      );
      assert.deepEqual(
        counts,
        counts.map(() => 0),
      );
    };

    // RAISERROR does not honour XACT_ABORT: before its statements were wrapped in TRY...CATCH, the composed request
    // ran on to COMMIT while mssql reported the error (marker and write committed, the message reported failed).
    const raises = (): BoundStatement => ({
      sql:
        backend.dialect === "sqlserver"
          ? "IF @p1 > 0 RAISERROR('sbinbox test: refused %d', 16, 1, @p1)"
          : "SELECT 1 / (0 * $1::int) AS refused",
      params: [7],
    });

    it("a statement that raises after a write: nothing commits, the message fails and is classified", async () => {
      const k = key();
      const outcome = await store.process(k, () => Promise.reject(new Error("work must not run")), {
        statements: [effect(k), raises(), effect(k)],
      });
      assert.equal(outcome.kind, "failed");
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
      const error = outcome.kind === "failed" ? outcome.error : undefined;
      if (backend.dialect === "sqlserver")
        assert.match(String((error as Error).message), /sbinbox test: refused 7/);
      else assert.equal((error as { code?: string }).code, "22012");
      assert.equal(await markers(k), 0, "no marker: the retry runs it again");
      assert.equal(await effects(k), 0, "the write before it rolled back");
      if (backend.dialect === "sqlserver") await noTransactionOpen();
    });

    it("a batch with a statement that raises rolls back whole; alone, the others commit once", async () => {
      const keys = [key(), key(), key()];
      const items = [
        item(keys[0]!, [effect(keys[0]!)]),
        item(keys[1]!, [effect(keys[1]!), raises()]),
        item(keys[2]!, [effect(keys[2]!)]),
      ];
      const result = await store.processBatch("ledger", items);
      assert.equal(result.reason, "handler_error");
      assert.deepEqual(await Promise.all(keys.map(markers)), [0, 0, 0]);
      assert.deepEqual(await Promise.all(keys.map(effects)), [0, 0, 0]);
      const alone = await Promise.all(items.map((it, i) => store.process(keys[i]!, it.work, it)));
      assert.deepEqual(
        alone.map((o) => o.kind),
        ["committed", "failed", "committed"],
      );
      assert.deepEqual(await Promise.all(keys.map(effects)), [1, 0, 1]);
      assert.deepEqual(await Promise.all(keys.map(markers)), [1, 0, 1]);
    });

    it("a savepoint among the statements is never sent: alone the message fails permanently with nothing applied", async () => {
      const taken = (nextOrder += 1);
      await db.raw.query(db.sql.insertOrder, [taken]);
      const k = key();
      // Recovered by the savepoint, PostgreSQL would commit while the failed statement reported the message failed.
      const [save, back]: BoundStatement[] =
        backend.dialect === "sqlserver"
          ? [
              { sql: "SAVE TRANSACTION s1", params: [] },
              { sql: "ROLLBACK TRANSACTION s1", params: [] },
            ]
          : [
              { sql: "SAVEPOINT s1", params: [] },
              { sql: "ROLLBACK TO SAVEPOINT s1", params: [] },
            ];
      const outcome = await store.process(k, () => Promise.resolve(), {
        statements: [effect(k), save!, order(taken), back!],
      });
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
      assert.equal(await markers(k), 0);
      assert.equal(await effects(k), 0);
    });

    it("a batch past one request's parameters is split inside one transaction, and commits whole", async () => {
      // 3 messages of 400 statements of 2 parameters: 2,400 parameters with the markers' 4, over 2,100.
      const keys = [key(), key(), key()];
      const items = keys.map((k) =>
        item(
          k,
          Array.from({ length: 400 }, () => effect(k)),
        ),
      );
      counted.reset();
      const result = await store.processBatch("ledger", items);
      // SQL Server: two requests and COMMIT in the transaction (BEGIN is the driver's own); PostgreSQL: one write.
      assert.equal(counted.turns, backend.dialect === "sqlserver" ? 3 : 1, "round trips");
      assert.equal(result.failure, undefined, String(result.failure));
      assert.deepEqual(
        result.outcomes.map((o) => o.kind),
        ["committed", "committed", "committed"],
      );
      assert.deepEqual(await Promise.all(keys.map(effects)), [400, 400, 400]);
    });

    it("a failing split batch leaves nothing: no marker, no statement of any message", async () => {
      const taken = (nextOrder += 1);
      await db.raw.query(db.sql.insertOrder, [taken]);
      const keys = [key(), key(), key()];
      const items = keys.map((k, i) =>
        item(k, [...Array.from({ length: 400 }, () => effect(k)), ...(i === 2 ? [order(taken)] : [])]),
      );
      const result = await store.processBatch("ledger", items);
      assert.equal(result.reason, "handler_error");
      assert.deepEqual(await Promise.all(keys.map(effects)), [0, 0, 0]);
      assert.deepEqual(await Promise.all(keys.map(markers)), [0, 0, 0]);
    });

    it("the pre-check finds a redelivery's marker: that one is a duplicate and the others commit in the batch", async () => {
      const checking = new InboxCore(counted.driver);
      const keys = [key(), key()];
      await store.process(keys[0]!, () => Promise.resolve());
      const result = await checking.processBatch("ledger", [
        { ...item(keys[0]!, [effect(keys[0]!)]), firstDelivery: false },
        { ...item(keys[1]!, [effect(keys[1]!)]), firstDelivery: false },
      ]);
      assert.deepEqual(
        result.outcomes.map((o) => o.kind),
        ["duplicate", "committed"],
      );
      assert.deepEqual(await Promise.all(keys.map(effects)), [0, 1]);
    });

    if (backend.dialect === "sqlserver")
      it("a pooled connection released with a transaction still open is closed, never handed to the next request", async function () {
        skipFor(this, await tracksTextTransactions(db));
        // A batch that BEGINs and ends without COMMIT or ROLLBACK, as a compile-time error or a timeout can leave one.
        await db.raw.query("BEGIN TRANSACTION; SELECT 1 AS n;");
        await noTransactionOpen();
      });

    it("a statement that names a missing table fails the message and leaves no transaction open on the pool", async () => {
      const k = key();
      const missing: BoundStatement = {
        sql:
          backend.dialect === "sqlserver"
            ? "INSERT INTO dbo.NoSuchTable_sbinbox (Id) VALUES (@p1)"
            : "INSERT INTO no_such_table_sbinbox (id) VALUES ($1)",
        params: [1],
      };
      const outcome = await store.process(k, () => Promise.resolve(), { statements: [effect(k), missing] });
      assert.equal(outcome.kind, "failed");
      assert.equal(await markers(k), 0);
      assert.equal(await effects(k), 0);
      // Every pooled connection afterwards is outside any transaction (the next messages' work commits).
      const open =
        backend.dialect === "sqlserver"
          ? "SELECT @@TRANCOUNT AS n"
          : "SELECT CASE WHEN now() = statement_timestamp() THEN 0 ELSE 1 END AS n";
      const counts = await Promise.all(Array.from({ length: 8 }, () => scalar(db.raw, open)));
      assert.deepEqual(
        counts,
        counts.map(() => 0),
      );
      const after = key();
      assert.deepEqual(await store.process(after, () => Promise.resolve(), { statements: [effect(after)] }), {
        kind: "committed",
      });
      assert.equal(await effects(after), 1);
    });
  });
}
