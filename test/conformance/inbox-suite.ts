import assert from "node:assert/strict";
import { messageKey } from "../../src/inbox/message-key.ts";
import type { ProcessOutcome } from "../../src/domain/outcome.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { ClaimLostError } from "../../src/inbox/errors.ts";
import type { InboxKey, InboxStore } from "../../src/inbox/store.ts";
import { keyLocked, scalar, type Backend, type BackendDatabase } from "./backends.ts";
import { disposingAfter, gateKeeper, skipFor } from "./guards.ts";
import { probeServer } from "./server-features.ts";
import { loadMigrations } from "../../src/inbox/migrations.ts";
import { POSTGRES_MIGRATIONS_DIR } from "../../src/inbox/postgres/adapter.ts";
import { postgresSql as postgresStatements } from "../../src/inbox/postgres/statements.ts";
import { SQLSERVER_MIGRATIONS_DIR } from "../../src/inbox/sqlserver/adapter.ts";
import { CREATE_SCHEMA, sqlServerSql as sqlServerStatements } from "../../src/inbox/sqlserver/statements.ts";

/** Polls a condition on the database (not a sleep: it returns as soon as the condition holds). */
async function waitUntil(what: string, condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Settles to "pending" if the promise has not settled by the time already-queued callbacks have run. */
async function state(promise: Promise<unknown>): Promise<"pending" | "settled"> {
  const marker = Symbol("pending");
  const winner = await Promise.race([
    promise.then(() => "settled" as const),
    new Promise((r) => setImmediate(() => r(marker))),
  ]);
  return winner === marker ? "pending" : "settled";
}

/** How long a consumer gets to (wrongly) finish while the key probe shows the key held. */
const PROBE_WINDOW_MS = 1000;

let counter = 0;
function key(consumer = "billing"): InboxKey {
  counter += 1;
  return { messageId: `msg-${process.pid}-${counter}-${"x".repeat(8)}`, consumer };
}

/** The conformance suite: every adapter must pass it on a real database. */
export function inboxConformance(backend: Backend): void {
  describe(`inbox conformance: ${backend.name}`, function () {
    let db: BackendDatabase;
    let store: InboxStore;
    const { gate, openAll } = gateKeeper();
    /** What this server lacks, found by probing it (never by its name): each is a reason to skip, or undefined. */
    const lacks: { view?: string; probe?: string; transactionId?: string } = {};

    before(async function () {
      db = await backend.database(`conformance_${backend.dialect}`);
      store = db.createStore({ preCheck: false });
      await store.migrate();
      await db.raw.query(db.sql.createEffects);
      await db.raw.query(db.sql.createOrders);
      await db.raw.query(db.sql.createNaiveInbox);
      // The server's features are probed by themselves (server-features.ts); the project's statements that use
      // them are then run unguarded, so a broken one fails the tests rather than skipping them.
      const server = await probeServer(db);
      seesBlocking = server.view === undefined && (await scalar(db.raw, db.sql.canSeeBlocking)) === 1;
      if (seesBlocking) await scalar(db.raw, db.sql.blockedSessions);
      else
        lacks.view = `other sessions' lock waits cannot be seen (${server.view ?? "no permission to see them"})`;
      lacks.probe = server.hintedWait && `the key probe cannot work here: ${server.hintedWait}`;
      lacks.transactionId = server.transactionId && `no transaction id to read (${server.transactionId})`;
    });

    /** Why a test that must see a consumer wait on a key cannot run here, if it cannot (probeOnly: by the probe). */
    const cannotSeeWait = (probeOnly = false): string | undefined =>
      probeOnly || !seesBlocking
        ? lacks.probe && `${lacks.view ?? "by the probe alone"}; ${lacks.probe}`
        : undefined;

    // A failed test may leave a gate closed, and its transaction open with it: open them, so clean-up never waits.
    afterEach(openAll);

    after(async function () {
      await db?.dispose();
    });

    const effect = (k: InboxKey) => (tx: SqlExecutor) =>
      tx.query(db.sql.insertEffect, [k.messageId, k.consumer]).then(() => undefined);
    let seesBlocking = false;
    /**
     * Waits until `waiter` (a consumer of key `k`) is blocked on the key another consumer holds, so the test's next
     * step happens while it waits. With a view of other sessions: until one of this run's sessions waits inside its
     * Inbox table. Without one (Azure SQL Database, or a login without VIEW SERVER STATE), or when `probeOnly`:
     * until a third session finds the key held, then the waiter gets PROBE_WINDOW_MS to (wrongly) finish while the
     * key stays held. That window is not an event: without a view of the waiter, not finishing within it is the only
     * evidence there is that it waits.
     */
    const blockedWait = async (
      what: string,
      k: InboxKey,
      waiter: Promise<unknown>,
      probeOnly = false,
    ): Promise<void> => {
      if (seesBlocking && !probeOnly) {
        await waitUntil(what, async () => (await scalar(db.raw, db.sql.blockedSessions)) >= 1);
        return;
      }
      await waitUntil(`${what} (the key is held, by a probe)`, () => keyLocked(db, k.messageId, k.consumer));
      await Promise.race([waiter, new Promise((resolve) => setTimeout(resolve, PROBE_WINDOW_MS))]);
      assert.ok(
        await keyLocked(db, k.messageId, k.consumer),
        "the key was released during the probe's window",
      );
    };

    it("the blocking observation counts this run's consumers only, not another lock wait in the database", async function () {
      // An unrelated lock wait: two transactions insert the same order number under the Orders unique index.
      const holder = await db.raw.begin();
      const waiter = await db.raw.begin();
      let held = true;
      try {
        await holder.query(db.sql.insertOrder, [777_001]);
        const blocked = waiter.query(db.sql.insertOrder, [777_001]).then(
          () => "inserted",
          () => "failed",
        );
        if (seesBlocking) {
          await waitUntil(
            "the unrelated insert waits",
            async () => (await scalar(db.raw, db.sql.anyBlockedSessions)) >= 1,
          );
          assert.equal(
            await scalar(db.raw, db.sql.blockedSessions),
            0,
            "another lock wait counted as this run's",
          );
        }
        const k = key();
        assert.equal(await keyLocked(db, k.messageId, k.consumer), false, "a free key probed as held");
        held = false;
        await holder.rollback();
        assert.equal(await blocked, "inserted");
      } finally {
        if (held) await holder.rollback();
        await waiter.rollback();
      }
    });

    it("the key probe finds a key held by an open consumer, and not once it has committed", async function () {
      skipFor(this, lacks.probe);
      const k = key();
      const inserted = gate();
      const release = gate();
      const a = store.process(k, async (tx) => {
        await effect(k)(tx);
        inserted.open();
        await release.promise;
      });
      await inserted.promise;
      assert.equal(await keyLocked(db, k.messageId, k.consumer), true);
      release.open();
      assert.equal((await a).kind, "committed");
      assert.equal(await keyLocked(db, k.messageId, k.consumer), false);
    });

    describe("migrate", function () {
      it("two concurrent runs leave one correct schema, and a third run changes nothing", async function () {
        const fresh = await backend.database(`migrate_${backend.dialect}`);
        await disposingAfter(fresh, async () => {
          const a = fresh.createStore();
          const b = fresh.createStore();
          const [ra, rb] = await Promise.all([a.migrate(), b.migrate()]);
          const appliedTwice = [...ra.applied, ...rb.applied];
          assert.deepEqual(
            appliedTwice,
            ["0001_inbox", "0002_inbox_markers"],
            "exactly one run applies the migrations",
          );
          assert.equal(await scalar(fresh.raw, fresh.sql.countVersions), 2);
          assert.equal(await scalar(fresh.raw, fresh.sql.countUniqueIndex), 1);
          const again = await a.migrate();
          assert.deepEqual(again.applied, []);
          assert.equal(await scalar(fresh.raw, fresh.sql.countVersions), 2);
        });
      });
    });

    describe("migration 0002 on an inbox with markers", function () {
      it("the markers written before the move still stop their redeliveries, alone, in a batch and as claims", async function () {
        const fresh = await backend.database(`move_${backend.dialect}`);
        await disposingAfter(fresh, async () => {
          await atVersionOne(backend.dialect, fresh);
          await fresh.raw.query(fresh.sql.insertLegacyMarker, ["before-move", "orders"]);
          await fresh.raw.query(fresh.sql.insertLegacyMarker, ["BEFORE-MOVE", "orders"]);
          await fresh.raw.query(fresh.sql.insertLegacyClaim, ["claimed-before-move", "orders"]);
          const moved = fresh.createStore({ preCheck: false });
          assert.deepEqual((await moved.migrate()).applied, ["0002_inbox_markers"]);
          await fresh.raw.query(fresh.sql.createEffects);
          const effectIn = (k: InboxKey) => (tx: SqlExecutor) =>
            tx.query(fresh.sql.insertEffect, [k.messageId, k.consumer]).then(() => undefined);
          const old: InboxKey = { messageId: "before-move", consumer: "orders" };
          assert.deepEqual(await moved.process(old, effectIn(old)), { kind: "duplicate" });
          const fresher: InboxKey = { messageId: "after-move", consumer: "orders" };
          const batch = await moved.processBatch!("orders", [
            { messageId: "BEFORE-MOVE", work: effectIn({ messageId: "BEFORE-MOVE", consumer: "orders" }) },
            { messageId: fresher.messageId, work: effectIn(fresher) },
          ]);
          assert.deepEqual(
            batch.outcomes.map((o) => o.kind),
            ["duplicate", "committed"],
          );
          assert.equal((await moved.claim(old)).kind, "duplicate");
          assert.equal(await moved.isProcessed(old), true, "isProcessed reads the legacy table too");
          // A claim open at the move: its holder (an old worker) may be performing the effect, so it is busy until
          // the sweeper finds it stale, then claimed afresh, as a claim in the new table.
          const open: InboxKey = { messageId: "claimed-before-move", consumer: "orders" };
          assert.equal((await moved.claim(open)).kind, "busy");
          assert.equal(await moved.isProcessed(open), false);
          assert.equal(await moved.sweepStaleClaims(3_600_000), 0, "a fresh legacy claim is not stale");
          assert.equal((await moved.claim(open)).kind, "busy");
          assert.equal(await moved.sweepStaleClaims(0), 1);
          assert.equal((await moved.claim(open)).kind, "claimed");
          assert.equal(await scalar(fresh.raw, fresh.sql.countEffects, [old.messageId]), 0);
          assert.equal(await scalar(fresh.raw, fresh.sql.countEffects, ["BEFORE-MOVE"]), 0);
          assert.equal(await scalar(fresh.raw, fresh.sql.countEffects, [fresher.messageId]), 1);
          // Exactly: another case of the same letters is another message. (Counted last: the test's Effects
          // table takes the database's collation, case-insensitive on SQL Server.)
          const other: InboxKey = { messageId: "Before-Move", consumer: "orders" };
          assert.equal((await moved.process(other, effectIn(other))).kind, "committed");
        });
      });
    });

    describe("the seeds' race: two consumers, one message, a gap between check and commit", function () {
      it("control: check-then-insert without a unique index applies the effect twice", async function () {
        const k = key();
        const bothChecked = { n: 0, gate: gate() };
        const naive = async () => {
          const tx = await db.raw.begin();
          try {
            const seen = await tx.query(db.sql.naiveCheck, [k.messageId, k.consumer]);
            bothChecked.n += 1;
            if (bothChecked.n === 2) bothChecked.gate.open();
            await bothChecked.gate.promise; // the gap: the other instance checks meanwhile
            if (seen.rows.length === 0) {
              await tx.query(db.sql.insertEffect, [k.messageId, k.consumer]);
              await tx.query(db.sql.naiveInsert, [k.messageId, k.consumer]);
            }
            await tx.commit();
          } catch (error) {
            await tx.rollback();
            throw error;
          }
        };
        await Promise.all([naive(), naive()]);
        assert.equal(
          await scalar(db.raw, db.sql.countEffects, [k.messageId]),
          2,
          "the naive handler loses the race",
        );
      });

      it("with the inbox's unique index: one effect, one marker, and the loser sees duplicate", async function () {
        skipFor(this, cannotSeeWait());
        const k = key();
        const checked = gate();
        const gap = gate();
        const first = store.process(k, async (tx) => {
          await effect(k)(tx);
          checked.open();
          await gap.promise; // the gap between the check (the marker insert) and the commit
        });
        await checked.promise;
        const second = store.process(k, effect(k));
        await blockedWait("the second consumer waits on the marker's key lock", k, second);
        gap.open();
        const outcomes = (await Promise.all([first, second])).map((o) => o.kind).sort();
        assert.deepEqual(outcomes, ["committed", "duplicate"]);
        assert.equal(await scalar(db.raw, db.sql.countEffects, [k.messageId]), 1);
        assert.equal(await scalar(db.raw, db.sql.countMarkers, [messageKey(k.messageId)]), 1);
      });
    });

    describe("overlap: A has inserted the marker and not committed", function () {
      async function overlap(
        aEnds: "commit" | "rollback",
        probeOnly = false,
      ): Promise<{ a: ProcessOutcome; b: ProcessOutcome; key: InboxKey }> {
        const k = key();
        const inserted = gate();
        const release = gate();
        const a = store.process(k, async (tx) => {
          await effect(k)(tx);
          inserted.open();
          await release.promise;
          if (aEnds === "rollback") throw new Error("A fails after B started waiting");
        });
        await inserted.promise;
        const b = store.process(k, effect(k));
        await blockedWait("B waits on A's key lock", k, b, probeOnly);
        assert.equal(await state(b), "pending", "B must still be waiting while A is open");
        release.open();
        return { a: await a, b: await b, key: k };
      }

      it("A commits: B is a duplicate", async function () {
        skipFor(this, cannotSeeWait());
        const { a, b, key: k } = await overlap("commit");
        assert.equal(a.kind, "committed");
        assert.equal(b.kind, "duplicate");
        assert.equal(await scalar(db.raw, db.sql.countEffects, [k.messageId]), 1);
      });

      it("A commits: B is a duplicate, observed by the key probe alone (the path of a login without a view)", async function () {
        skipFor(this, cannotSeeWait(true));
        const { a, b } = await overlap("commit", true);
        assert.equal(a.kind, "committed");
        assert.equal(b.kind, "duplicate");
      });

      it("A rolls back: B commits", async function () {
        skipFor(this, cannotSeeWait());
        const { a, b, key: k } = await overlap("rollback");
        assert.equal(a.kind, "failed");
        assert.equal(b.kind, "committed");
        assert.equal(await scalar(db.raw, db.sql.countEffects, [k.messageId]), 1);
        assert.equal(await scalar(db.raw, db.sql.countMarkers, [messageKey(k.messageId)]), 1);
      });
    });

    it("all or nothing: a failing business write leaves no marker and no effect", async function () {
      const k = key();
      const outcome = await store.process(k, async (tx) => {
        await effect(k)(tx);
        await tx.query("SELECT * FROM no_such_table_at_all");
      });
      assert.equal(outcome.kind, "failed");
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
      assert.equal(await scalar(db.raw, db.sql.countMarkers, [messageKey(k.messageId)]), 0);
      assert.equal(await scalar(db.raw, db.sql.countEffects, [k.messageId]), 0);
    });

    it("a unique violation on a business table's own unique index is a failure, not a duplicate", async function () {
      await db.raw.query(db.sql.insertOrder, [4242]);
      const k = key();
      const outcome = await store.process(k, async (tx) => {
        await tx.query(db.sql.insertOrder, [4242]);
      });
      assert.equal(outcome.kind, "failed");
      assert.equal(outcome.kind === "failed" && outcome.errorClass, "permanent");
      assert.equal(await scalar(db.raw, db.sql.countMarkers, [messageKey(k.messageId)]), 0);
      assert.equal(await store.isProcessed(k), false);
    });

    it("takes MessageIds of 128 characters and tells ids apart that differ only in case", async function () {
      const long: InboxKey = { messageId: `L${"m".repeat(127)}`, consumer: "billing" };
      assert.equal(long.messageId.length, 128);
      assert.equal((await store.process(long, effect(long))).kind, "committed");
      assert.equal((await store.process(long, effect(long))).kind, "duplicate");
      const lower = key();
      const upper: InboxKey = { messageId: lower.messageId.toUpperCase(), consumer: lower.consumer };
      assert.equal((await store.process(lower, effect(lower))).kind, "committed");
      assert.equal((await store.process(upper, effect(upper))).kind, "committed");
    });

    // SQL Server compares varbinary ignoring trailing 0x00 bytes (0x41 = 0x4100): under the first key encoding each
    // pair here was one key there, so the second message of a pair was completed as a duplicate, its work never run.
    it("MessageIds whose keys once differed only by trailing zero bytes are distinct messages", async function () {
      const consumer = `zeros-${process.pid}-${Date.now()}`;
      const ids = [
        "AAAAAAAAAAAAAA",
        "41414141-4141-4141-4141-41414141ff00",
        "\uD800aaaaaaa",
        "fe00d861-0061-0061-0061-006100610061",
        "00000000-0000-0000-0000-000000000000",
        "",
        "a",
        "a\u0000",
      ];
      let ran = 0;
      const work = () => {
        ran += 1;
        return Promise.resolve();
      };
      for (const messageId of ids)
        assert.equal(
          (await store.process({ messageId, consumer }, work)).kind,
          "committed",
          JSON.stringify(messageId),
        );
      for (const messageId of ids)
        assert.equal(
          (await store.process({ messageId, consumer }, work)).kind,
          "duplicate",
          JSON.stringify(messageId),
        );
      assert.equal(ran, ids.length);
    });

    it("two consumers of one message each apply their effect once", async function () {
      const billing = key("billing");
      const shipping: InboxKey = { messageId: billing.messageId, consumer: "shipping" };
      const first = await Promise.all([
        store.process(billing, effect(billing)),
        store.process(shipping, effect(shipping)),
      ]);
      const again = await Promise.all([
        store.process(billing, effect(billing)),
        store.process(shipping, effect(shipping)),
      ]);
      assert.deepEqual(
        first.map((o) => o.kind),
        ["committed", "committed"],
      );
      assert.deepEqual(
        again.map((o) => o.kind),
        ["duplicate", "duplicate"],
      );
      assert.equal(await scalar(db.raw, db.sql.countEffects, [billing.messageId]), 2);
      assert.equal(await scalar(db.raw, db.sql.countMarkers, [messageKey(billing.messageId)]), 2);
    });

    it("a retry after a failure runs on a fresh transaction and succeeds", async function () {
      const k = key();
      let firstHandle: SqlExecutor | undefined;
      let attempt = 0;
      const work = async (tx: SqlExecutor) => {
        attempt += 1;
        await effect(k)(tx);
        if (attempt === 1) {
          firstHandle = tx;
          throw new Error("transient trouble in the handler");
        }
      };
      assert.equal((await store.process(k, work)).kind, "failed");
      assert.equal((await store.process(k, work)).kind, "committed");
      assert.equal(attempt, 2);
      assert.equal(await scalar(db.raw, db.sql.countEffects, [k.messageId]), 1);
      await assert.rejects(
        firstHandle!.query(db.sql.insertEffect, [k.messageId, k.consumer]),
        /transaction has ended/,
      );
    });

    it("the retry's transaction is not the failed one's: their transaction ids differ", async function () {
      skipFor(this, lacks.transactionId);
      const k = key();
      const transactions: string[] = [];
      const work = async (tx: SqlExecutor) => {
        const { rows } = await tx.query<{ id: unknown }>(db.sql.transactionId);
        transactions.push(String(rows[0]?.id));
        await effect(k)(tx);
        if (transactions.length === 1) throw new Error("transient trouble in the handler");
      };
      assert.equal((await store.process(k, work)).kind, "failed");
      assert.equal((await store.process(k, work)).kind, "committed");
      assert.equal(transactions.length, 2);
      assert.notEqual(transactions[0], transactions[1], "the retry must not reuse the failed transaction");
    });

    it("the pre-check reports processed markers only, and a pre-checking store skips a late redelivery", async function () {
      const k = key();
      const prechecking = db.createStore({ preCheck: true });
      assert.equal(await prechecking.isProcessed(k), false);
      assert.equal((await prechecking.process(k, effect(k))).kind, "committed");
      assert.equal(await prechecking.isProcessed(k), true);
      let ran = false;
      const again = await prechecking.process(k, () => {
        ran = true;
        return Promise.resolve();
      });
      assert.equal(again.kind, "duplicate");
      assert.equal(ran, false);
      const claimKey = key();
      assert.equal((await store.claim(claimKey)).kind, "claimed");
      assert.equal(await store.isProcessed(claimKey), false, "an open claim is not processed");
    });

    it("a first delivery whose marker exists (a resend past the duplicate window) is a duplicate, its work never run", async function () {
      const k = key();
      const store2 = db.createStore({ preCheck: "redeliveries" });
      assert.equal((await store2.process(k, effect(k), { firstDelivery: true })).kind, "committed");
      let ran = false;
      const work = () => {
        ran = true;
        return Promise.resolve();
      };
      assert.equal((await store2.process(k, work, { firstDelivery: true })).kind, "duplicate");
      assert.equal((await store2.process(k, work, { firstDelivery: false })).kind, "duplicate");
      assert.equal(ran, false);
      assert.equal(await scalar(db.raw, db.sql.countEffects, [k.messageId]), 1);
    });

    describe("batch: several messages, one transaction", function () {
      const batchOf = (keys: InboxKey[], work = effect) =>
        keys.map((k) => ({ messageId: k.messageId, work: work(k) }));
      const effects = async (keys: InboxKey[]) =>
        Promise.all(keys.map((k) => scalar(db.raw, db.sql.countEffects, [k.messageId])));
      const markers = async (keys: InboxKey[]) =>
        Promise.all(keys.map((k) => scalar(db.raw, db.sql.countMarkers, [messageKey(k.messageId)])));

      it("fresh messages: all committed, one marker and one effect each", async function () {
        const keys = [key(), key(), key(), key()];
        const result = await store.processBatch!("billing", batchOf(keys));
        assert.equal(result.failure, undefined);
        assert.deepEqual(
          result.outcomes.map((o) => o.kind),
          ["committed", "committed", "committed", "committed"],
        );
        assert.deepEqual(await effects(keys), [1, 1, 1, 1]);
        assert.deepEqual(await markers(keys), [1, 1, 1, 1]);
      });

      it("pre-check for redeliveries only: a first delivery whose marker exists is still a duplicate alone", async function () {
        const keys = [key(), key(), key(), key()];
        // keys[1]: a first delivery resent past the duplicate window; keys[3]: a redelivery. Both have markers.
        for (const k of [keys[1]!, keys[3]!])
          assert.equal((await store.process(k, effect(k))).kind, "committed");
        const batching = db.createStore({ preCheck: "redeliveries" });
        const items = batchOf(keys).map((item, i) => ({ ...item, firstDelivery: i < 2 }));
        const result = await batching.processBatch!("billing", items);
        if (backend.dialect === "postgres") {
          // No duplicate seen yet, so the handlers started beside the marker insert, before it answered. The insert
          // skipped keys[1]: it is a duplicate (decided from the keys returned), and since its handler had written
          // beside the others the batch rolled back; the two fresh ones go alone.
          assert.match(String(result.failure), /MarkerExistsError: the inbox markers of 1 message/);
          assert.deepEqual(
            result.outcomes.map((o) => o.kind),
            ["single", "duplicate", "single", "duplicate"],
          );
          assert.deepEqual(await effects(keys), [0, 1, 0, 1]);
          for (const k of [keys[0]!, keys[2]!])
            assert.equal((await batching.process(k, effect(k))).kind, "committed");
          // Now a first delivery has been a duplicate lately: the next batch's handlers wait for the insert's
          // answer, and the batch commits its fresh messages beside the duplicate.
          const next = [key(), key(), key(), key()];
          assert.equal((await store.process(next[1]!, effect(next[1]!))).kind, "committed");
          const again = await batching.processBatch!(
            "billing",
            batchOf(next).map((item) => ({ ...item, firstDelivery: true })),
          );
          assert.equal(again.failure, undefined, String(again.failure));
          assert.deepEqual(
            again.outcomes.map((o) => o.kind),
            ["committed", "duplicate", "committed", "committed"],
          );
          assert.deepEqual(await effects(next), [1, 1, 1, 1]);
        } else {
          // SQL Server, whose insert cannot skip a key, reads for all four: the batch commits the two fresh ones.
          assert.equal(result.failure, undefined, String(result.failure));
          assert.deepEqual(
            result.outcomes.map((o) => o.kind),
            ["committed", "duplicate", "committed", "duplicate"],
          );
        }
        assert.deepEqual(await effects(keys), [1, 1, 1, 1]);
        assert.deepEqual(await markers(keys), [1, 1, 1, 1]);
      });

      it("mixed with redeliveries whose markers exist: those are duplicates (pre-check on and off), the rest commit", async function () {
        for (const preCheck of [true, false]) {
          const keys = [key(), key(), key(), key()];
          const done = [keys[1]!, keys[3]!];
          for (const k of done) assert.equal((await store.process(k, effect(k))).kind, "committed");
          const batching = db.createStore({ preCheck });
          const result = await batching.processBatch!("billing", batchOf(keys));
          const kinds = result.outcomes.map((o) => o.kind);
          if (backend.dialect === "sqlserver" && !preCheck) {
            // No pre-check: the multi-row insert meets the existing keys and the batch goes message by message.
            assert.deepEqual(kinds, ["single", "single", "single", "single"]);
            assert.deepEqual(await effects(keys), [0, 1, 0, 1]);
          } else {
            assert.deepEqual(
              kinds,
              ["committed", "duplicate", "committed", "duplicate"],
              `preCheck ${preCheck}`,
            );
            assert.deepEqual(await effects(keys), [1, 1, 1, 1]);
          }
          assert.deepEqual(await markers(keys), [
            preCheck || backend.dialect !== "sqlserver" ? 1 : 0,
            1,
            preCheck || backend.dialect !== "sqlserver" ? 1 : 0,
            1,
          ]);
        }
      });

      it("keyed messages (disjoint, and two sharing a key), three statements each: all committed, one effect each", async function () {
        // On a dialect that runs statements concurrently they go side by side; on SQL Server (one request at a
        // time on a connection) one after another: a second request while one runs would fail the batch.
        const keys = [key(), key(), key(), key(), key()];
        const order: string[] = [];
        const result = await store.processBatch!(
          "billing",
          keys.map((k, i) => ({
            messageId: k.messageId,
            keys: [i === 0 || i === 4 ? "shared" : `own:${i}`],
            work: async (tx: SqlExecutor) => {
              await tx.query(db.sql.countEffects, [k.messageId]);
              await effect(k)(tx);
              await tx.query(db.sql.countEffects, [k.messageId]);
              order.push(k.messageId);
            },
          })),
        );
        assert.equal(result.failure, undefined, String(result.failure));
        assert.deepEqual(new Set(result.outcomes.map((o) => o.kind)), new Set(["committed"]));
        assert.deepEqual(await effects(keys), [1, 1, 1, 1, 1]);
        assert.deepEqual(await markers(keys), [1, 1, 1, 1, 1]);
        // The first and the fifth share a key: the fifth starts only once the first has finished.
        assert.equal(order.length, 5);
        assert.ok(order.indexOf(keys[4]!.messageId) > order.indexOf(keys[0]!.messageId), order.join(","));
      });

      /** A batch of three, each writing its effect; the second then does `then` (throws, or runs a failing statement). */
      const secondFails = async (then: (tx: SqlExecutor) => Promise<void>) => {
        const keys = [key(), key(), key()];
        const result = await store.processBatch!(
          "billing",
          keys.map((k, i) => ({
            messageId: k.messageId,
            // Disjoint keys: side by side where the dialect runs statements concurrently (PostgreSQL).
            keys: [`own:${i}`],
            work: async (tx: SqlExecutor) => {
              await effect(k)(tx);
              if (i === 1) await then(tx);
            },
          })),
        );
        return { keys, result };
      };

      it("one handler throws: the batch rolls back whole, nothing written; that message fails with its error (as alone), the others come back single", async function () {
        const { keys, result } = await secondFails(() =>
          Promise.reject(new Error("the second handler fails")),
        );
        assert.match(String(result.failure), /the second handler fails/);
        assert.deepEqual(
          result.outcomes.map((o) => o.kind),
          ["single", "failed", "single"],
        );
        const thrown = result.outcomes[1]!;
        assert.ok(thrown.kind === "failed" && /the second handler fails/.test(String(thrown.error)));
        assert.equal(thrown.errorClass, "permanent", "a handler's own error, judged by its retry policy");
        assert.deepEqual(await effects(keys), [0, 0, 0]);
        assert.deepEqual(await markers(keys), [0, 0, 0]);
      });

      it("a handler's statement fails (caught or not): that is the batch's failure, so every message comes back single", async function () {
        // Beside others its transaction is not its own (the failure may be another's doing, 25P02 after it): each
        // message decides alone, with the transaction to itself.
        for (const caught of [false, true]) {
          const { keys, result } = await secondFails(async (tx) => {
            const failing = tx.query("SELECT * FROM no_such_table_at_all");
            if (!caught) await failing;
            else await failing.catch(() => undefined);
          });
          assert.notEqual(result.failure, undefined, `caught ${caught}`);
          assert.deepEqual(
            result.outcomes.map((o) => o.kind),
            ["single", "single", "single"],
            `caught ${caught}`,
          );
          assert.deepEqual(await effects(keys), [0, 0, 0]);
        }
      });

      it("racing a concurrent delivery of one of its messages: that one ends duplicate (or alone), the others commit", async function () {
        skipFor(this, cannotSeeWait());
        const keys = [key(), key(), key()];
        const raced = keys[1]!;
        const inserted = gate();
        const release = gate();
        const other = store.process(raced, async (tx) => {
          await effect(raced)(tx);
          inserted.open();
          await release.promise;
        });
        await inserted.promise;
        const batch = store.processBatch!("billing", batchOf(keys));
        await blockedWait("the batch waits on the raced key", raced, batch);
        assert.equal(await state(batch), "pending", "the batch must wait while the other delivery is open");
        release.open();
        assert.equal((await other).kind, "committed");
        const result = await batch;
        const kinds = result.outcomes.map((o) => o.kind);
        if (backend.dialect === "postgres") {
          // Decided from the keys ON CONFLICT DO NOTHING RETURNING gave back, without an error.
          assert.deepEqual(kinds, ["committed", "duplicate", "committed"]);
          assert.deepEqual(await effects(keys), [1, 1, 1]);
        } else {
          // 2627 on the multi-row insert: the batch goes message by message, each insert deciding its own.
          assert.deepEqual(kinds, ["single", "single", "single"]);
          assert.deepEqual(await effects(keys), [0, 1, 0]);
          for (const k of [keys[0]!, keys[2]!])
            assert.equal((await store.process(k, effect(k))).kind, "committed");
          assert.equal((await store.process(raced, effect(raced))).kind, "duplicate");
        }
        assert.deepEqual(await markers(keys), [1, 1, 1]);
      });

      it("refuses a batch with a MessageId twice, or more rows than its statements take", async function () {
        const k = key();
        await assert.rejects(store.processBatch!("billing", batchOf([k, k])), /distinct MessageIds/);
        const many = Array.from({ length: 1001 }, () => key());
        await assert.rejects(store.processBatch!("billing", batchOf(many)), /1 to 1000 messages/);
      });

      it("the largest batch (1,000 messages) runs within the database's parameter limits", async function () {
        this.timeout(60_000);
        const keys = Array.from({ length: 1000 }, () => key());
        const prechecking = db.createStore({ preCheck: true });
        const result = await prechecking.processBatch!(
          "billing",
          batchOf(keys, () => () => Promise.resolve(undefined)),
        );
        assert.equal(result.failure, undefined, String(result.failure));
        assert.equal(result.outcomes.filter((o) => o.kind === "committed").length, 1000);
        const again = await prechecking.processBatch!(
          "billing",
          batchOf(keys, () => () => Promise.resolve(undefined)),
        );
        assert.equal(again.outcomes.filter((o) => o.kind === "duplicate").length, 1000);
      });
    });

    describe("two-phase claim", function () {
      it("two racing claimants make one external call", async function () {
        const k = key("mailer");
        let externalCalls = 0;
        const claimant = async () => {
          const claim = await store.claim(k);
          if (claim.kind !== "claimed") return claim.kind;
          externalCalls += 1; // the external effect, keyed by k.messageId
          await store.markProcessed(k, claim.claimId);
          return claim.kind;
        };
        const kinds = await Promise.all([claimant(), claimant()]);
        assert.equal(externalCalls, 1);
        assert.equal(kinds.filter((c) => c === "claimed").length, 1, `outcomes: ${kinds.join(", ")}`);
        const loser = kinds.find((c) => c !== "claimed");
        assert.ok(loser === "busy" || loser === "duplicate", `loser saw ${loser}`);
        assert.equal((await store.claim(k)).kind, "duplicate");
        await store.markProcessed(k); // repeating it is harmless
      });

      it("a retry takes over its own open claim by id, under a new id, once; any other id, or none, finds it busy", async function () {
        const k = key("mailer");
        const first = await store.claim(k);
        assert.equal(first.kind, "claimed");
        const oldId = first.kind === "claimed" ? first.claimId : "0";
        // Two deliveries carrying the same claim id at once (a copy redelivered while its first delivery runs):
        // exactly one takes the claim over.
        const both = await Promise.all([store.claim(k, oldId), store.claim(k, oldId)]);
        assert.deepEqual(both.map((c) => c.kind).sort(), ["busy", "claimed"]);
        const taken = both.find((c) => c.kind === "claimed");
        const claimId = taken?.kind === "claimed" ? taken.claimId : "0";
        assert.notEqual(claimId, oldId);
        assert.equal(taken?.kind === "claimed" && taken.reentered, true);
        assert.equal((await store.claim(k, oldId)).kind, "busy", "the superseded id re-enters no more");
        await assert.rejects(store.markProcessed(k, oldId), ClaimLostError);
        assert.equal((await store.claim(k)).kind, "busy");
        assert.equal((await store.claim(k, String(Number(claimId) + 1_000_000))).kind, "busy");
        await store.markProcessed(k, claimId);
        assert.equal(
          (await store.claim(k, claimId)).kind,
          "duplicate",
          "a processed claim is never re-entered",
        );
      });

      it("a released claim (its message dead-lettered) is claimed afresh at once; a processed or another's is kept", async function () {
        const k = key("mailer");
        const first = await store.claim(k);
        const claimId = first.kind === "claimed" ? first.claimId : "0";
        assert.equal(await store.releaseClaim(k, String(Number(claimId) + 1_000_000)), false, "another id");
        assert.equal((await store.claim(k)).kind, "busy");
        assert.equal(await store.releaseClaim(k, claimId), true);
        assert.equal(await store.releaseClaim(k, claimId), false, "released once");
        const again = await store.claim(k);
        assert.equal(again.kind, "claimed", "a replay claims at once, no sweeper needed");
        const againId = again.kind === "claimed" ? again.claimId : "0";
        await store.markProcessed(k, againId);
        assert.equal(await store.releaseClaim(k, againId), false, "a processed marker is never released");
        assert.equal((await store.claim(k)).kind, "duplicate");
      });

      it("a claim left open is found by the sweeper and retried by one claimant", async function () {
        const k = key("mailer");
        const abandoned = await store.claim(k);
        assert.equal(abandoned.kind, "claimed");
        assert.equal((await store.claim(k)).kind, "busy");
        const openBefore = await store.countOpenClaims();
        assert.ok(openBefore >= 1);
        assert.equal(await store.sweepStaleClaims(60_000), 0, "a fresh claim is not stale");
        await db.raw.query(db.sql.ageMarker, [messageKey(k.messageId), 120]);
        assert.equal(await store.sweepStaleClaims(60_000), 1);
        assert.equal(await store.countOpenClaims(), openBefore - 1);
        const retries = await Promise.all([store.claim(k), store.claim(k)]);
        assert.deepEqual(retries.map((c) => c.kind).sort(), ["busy", "claimed"]);
        const winner = retries.find((c) => c.kind === "claimed");
        // The abandoned claimant wakes up late: its claim is gone, and it must be told.
        await assert.rejects(
          store.markProcessed(k, abandoned.kind === "claimed" ? abandoned.claimId : "0"),
          ClaimLostError,
        );
        await store.markProcessed(k, winner?.kind === "claimed" ? winner.claimId : "0");
        assert.equal(await store.isProcessed(k), true);
      });
    });

    it("cleanup deletes by ranges of the key only rows past retention, in batches, while inserts go on", async function () {
      // A database of its own: the markers past retention are the first Ids, as they are when time passes.
      const fresh = await backend.database(`retention_${backend.dialect}`);
      await disposingAfter(fresh, async () => {
        const own = fresh.createStore({ preCheck: false });
        await own.migrate();
        await fresh.raw.query(fresh.sql.createEffects);
        await fresh.raw.query(fresh.raw.statements.registerConsumer, ["retention"]);
        for (let i = 0; i < 25; i += 1) {
          await fresh.raw.query(fresh.sql.insertAgedMarker, [messageKey(`old-${i}`), "retention", 7200]);
        }
        let inserting = true;
        let inserted = 0;
        const writer = (async () => {
          while (inserting) {
            const k: InboxKey = { messageId: `new-${inserted}`, consumer: "retention" };
            const outcome = await own.process(k, (tx) =>
              tx.query(fresh.sql.insertEffect, [k.messageId, k.consumer]).then(() => undefined),
            );
            assert.equal(outcome.kind, "committed");
            inserted += 1;
          }
        })();
        const batches: number[] = [];
        try {
          await waitUntil("the writer has inserted past the first ranges", () =>
            Promise.resolve(inserted >= 10),
          );
          const deleted = await own.cleanup(3_600_000, 10, { onBatch: (n) => batches.push(n) });
          assert.equal(deleted, 25);
        } finally {
          inserting = false;
          await writer;
        }
        // Three ranges hold the 25 old ones (the third with 5 new ones); the fourth, all new, ends the run.
        assert.deepEqual(batches, [10, 10, 5, 0]);
        assert.equal(await scalar(fresh.raw, fresh.sql.countAllMarkers), inserted);
        const again: number[] = [];
        assert.equal(await own.cleanup(3_600_000, 10, { onBatch: (n) => again.push(n) }), 0);
        assert.deepEqual(again, [0], "the next run starts at the young rows: one range read");
        // A marker of an old message, once deleted, no longer stops a redelivery: that is what retention means.
        const old: InboxKey = { messageId: "old-3", consumer: "retention" };
        assert.equal(await own.isProcessed(old), false);
      });
    });

    it("answers a ping; classify() never calls an error outside the marker insert a duplicate", async function () {
      await store.ping();
      const k = key();
      assert.equal((await store.process(k, effect(k))).kind, "committed");
      // The inbox index's own violation, but raised by some other statement: not the duplicate signal.
      const error = await db.raw
        .query(db.sql.insertAgedMarker, [messageKey(k.messageId), k.consumer, 1])
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(error instanceof Error, "the second marker must be refused by the unique index");
      assert.equal(store.classify(error), "permanent");
    });
  });
}

/** An inbox at version 1, as `sbinbox migrate` left it before migration 0002 existed. */
async function atVersionOne(dialect: Backend["dialect"], db: BackendDatabase): Promise<void> {
  if (dialect === "postgres") {
    const sql = postgresStatements(db.schema ?? "public");
    const [first] = await loadMigrations(POSTGRES_MIGRATIONS_DIR);
    await db.raw.query(sql.CREATE_SCHEMA);
    await db.raw.query(sql.CREATE_VERSION_TABLE);
    const tx = await db.raw.begin();
    await tx.query(sql.SET_MIGRATION_SEARCH_PATH);
    await tx.query(first!.sql);
    await tx.query(sql.RECORD_VERSION, [1, first!.name]);
    await tx.commit();
    return;
  }
  const sql = sqlServerStatements(db.schema ?? "dbo");
  const [first] = await loadMigrations(SQLSERVER_MIGRATIONS_DIR);
  await db.raw.query(CREATE_SCHEMA, [db.schema ?? "dbo"]);
  await db.raw.query(sql.CREATE_VERSION_TABLE);
  await db.raw.query(sql.migrationInSchema(first!.sql));
  await db.raw.query(sql.RECORD_VERSION, [1, first!.name]);
}
