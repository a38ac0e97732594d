import assert from "node:assert/strict";
import { messageKey } from "../../src/inbox/message-key.ts";
import type { Dialect } from "../../src/domain/sql.ts";
import { TransactionControlError, UnawaitedStatementError } from "../../src/inbox/errors.ts";
import type { InboxKey, InboxStore } from "../../src/inbox/store.ts";
import { scalar, type Backend, type BackendDatabase } from "./backends.ts";
import { probeServer } from "./server-features.ts";

/**
 * Statements these tests need that differ by dialect, for the run's schema. The slow effect keeps its statement
 * running for 200 ms while the next one is given: WAITFOR DELAY where the server has it (probed once), and a loop
 * on the server's clock only where it does not (Babelfish), since the loop keeps a core busy.
 */
const dialectSql: Record<
  Dialect,
  (schema: string, waitfor: boolean) => { slowEffect: string; sessionSet: string; sneakedCommit: string }
> = {
  postgres: (schema) => ({
    slowEffect: `INSERT INTO "${schema}"."Effects" ("MessageId", "Consumer") SELECT $1, $2 FROM pg_sleep(0.2)`,
    sessionSet: `SET search_path TO pg_catalog`,
    sneakedCommit: `SELECT 1; /* ; */ COMMIT`,
  }),
  sqlserver: (schema, waitfor) => ({
    slowEffect: `${
      waitfor
        ? "WAITFOR DELAY '00:00:00.200';"
        : `DECLARE @until datetime2(7) = DATEADD(millisecond, 200, SYSUTCDATETIME());
WHILE SYSUTCDATETIME() < @until SET @until = @until;`
    }
INSERT INTO [${schema}].Effects (MessageId, Consumer) VALUES (@p1, @p2);`,
    sessionSet: `SET XACT_ABORT OFF`,
    sneakedCommit: `SELECT 1 AS one COMMIT`,
  }),
};

let counter = 0;
function key(): InboxKey {
  counter += 1;
  return { messageId: `tx-${process.pid}-${counter}`, consumer: "handle" };
}

/** What the transaction handle given to a handler guarantees, on every database. */
export function transactionHandleConformance(backend: Backend): void {
  describe(`inbox transaction handle: ${backend.name}`, function () {
    let db: BackendDatabase;
    let store: InboxStore;
    // The statements for this run's schema, known once its database is (for the tests' titles: the default's).
    let sql = dialectSql[backend.dialect](backend.dialect === "postgres" ? "public" : "dbo", true);

    before(async function () {
      db = await backend.database(`txhandle_${backend.dialect}`);
      const { waitfor } = await probeServer(db);
      sql = dialectSql[backend.dialect](
        db.schema ?? (backend.dialect === "postgres" ? "public" : "dbo"),
        waitfor === undefined,
      );
      store = db.createStore({ preCheck: false });
      await store.migrate();
      await db.raw.query(db.sql.createEffects);
    });

    after(async function () {
      await db?.dispose();
    });

    const markers = (k: InboxKey) => scalar(db.raw, db.sql.countMarkers, [messageKey(k.messageId)]);
    const effects = (k: InboxKey) => scalar(db.raw, db.sql.countEffects, [k.messageId]);

    it("two statements given at once (Promise.all) run one after the other and both commit", async function () {
      const k = key();
      const outcome = await store.process(k, async (tx) => {
        await Promise.all([
          tx.query(sql.slowEffect, [k.messageId, k.consumer]),
          tx.query(db.sql.insertEffect, [k.messageId, k.consumer]),
        ]);
      });
      assert.equal(outcome.kind, "committed", JSON.stringify(outcome));
      assert.equal(await effects(k), 2);
      assert.equal(await markers(k), 1);
    });

    it("two statements at once where the first fails: rolled back, and the next message commits", async function () {
      const k = key();
      const outcome = await store.process(k, async (tx) => {
        await Promise.all([
          tx.query("SELECT * FROM no_such_table_at_all"),
          tx.query(db.sql.insertEffect, [k.messageId, k.consumer]),
        ]);
      });
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
      assert.equal(await markers(k), 0);
      // The connection went back clean: the same message commits now, with no lock left behind.
      const retry = await store.process(k, (tx) =>
        tx.query(db.sql.insertEffect, [k.messageId, k.consumer]).then(() => undefined),
      );
      assert.equal(retry.kind, "committed");
      assert.equal(await effects(k), 1);
    });

    it("a handler that returns with its statement still running: commit waits for it", async function () {
      const k = key();
      const outcome = await store.process(k, (tx) => {
        void tx.query(sql.slowEffect, [k.messageId, k.consumer]); // not awaited
        return Promise.resolve();
      });
      assert.equal(outcome.kind, "committed");
      assert.equal(await effects(k), 1, "the statement finished before the commit");
    });

    it("a statement left running that then fails: not committed, and the error says why", async function () {
      const k = key();
      const outcome = await store.process(k, async (tx) => {
        await tx.query(db.sql.insertEffect, [k.messageId, k.consumer]);
        void tx.query("SELECT * FROM no_such_table_at_all");
      });
      assert.equal(outcome.kind, "failed");
      assert.ok(outcome.kind === "failed" && outcome.error instanceof UnawaitedStatementError);
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
      assert.equal(await markers(k), 0);
      assert.equal(await effects(k), 0);
    });

    for (const [label, statement] of [
      ["COMMIT", "COMMIT"],
      ["ROLLBACK", "ROLLBACK"],
      ["a COMMIT after another statement in the same text", sql.sneakedCommit],
      ["a session-level SET", sql.sessionSet],
    ] as const) {
      it(`${label} through tx is refused; nothing is committed, and a retry commits`, async function () {
        const k = key();
        let seen: unknown;
        const outcome = await store.process(k, async (tx) => {
          await tx.query(db.sql.insertEffect, [k.messageId, k.consumer]);
          // Even a handler that swallows the refusal does not get a commit.
          await tx.query(statement).catch((error: unknown) => (seen = error));
        });
        assert.ok(seen instanceof TransactionControlError, String(seen));
        assert.equal(outcome.kind, "failed");
        assert.ok(outcome.kind === "failed" && outcome.error instanceof TransactionControlError);
        assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
        assert.equal(await markers(k), 0);
        assert.equal(await effects(k), 0);
        const retry = await store.process(k, (tx) =>
          tx.query(db.sql.insertEffect, [k.messageId, k.consumer]).then(() => undefined),
        );
        assert.equal(retry.kind, "committed");
        assert.equal(await effects(k), 1);
      });
    }
  });
}
