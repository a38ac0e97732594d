import assert from "node:assert/strict";
import type { Dialect } from "../../src/domain/sql.ts";
import type { OutboxEvent } from "../../src/outbox/enqueue.ts";
import { startRelay, type Relay, type RelayOptions } from "../../src/outbox/relay.ts";
import type { OutboxStore } from "../../src/outbox/store.ts";
import { createOutboxSender, type OutboxSender } from "../../src/servicebus/outbox-sender.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { scalar, type Backend, type BackendDatabase } from "./backends.ts";
import { closeOutbox, openOutbox, type OpenedOutbox, type Upstream } from "./outbox-suite.ts";

/** A session queue per test, so that what one test leaves behind (a failed test's unreceived events) is not another's. */
const QUEUES = ["ordered-1", "ordered-2", "ordered-3", "ordered-4", "ordered-5"];

const sqlFor: Record<Dialect, Record<string, string>> = {
  postgres: {
    unsentOfKey: `SELECT count(*)::int AS n FROM "Outbox" WHERE "SessionId" = $1 AND "SentUtc" IS NULL`,
    unsent: `SELECT count(*)::int AS n FROM "Outbox" WHERE "SentUtc" IS NULL`,
    keyOfRow: `SELECT "Id" AS id, "SessionId" AS "sessionId", "Body" AS body FROM "Outbox"`,
    deleteSetAside: `DELETE FROM "Outbox" WHERE "SetAsideUtc" IS NOT NULL`,
  },
  sqlserver: {
    unsentOfKey: `SELECT COUNT(*) AS n FROM dbo.Outbox WHERE SessionId = @p1 AND SentUtc IS NULL`,
    unsent: `SELECT COUNT(*) AS n FROM dbo.Outbox WHERE SentUtc IS NULL`,
    keyOfRow: `SELECT Id AS id, SessionId AS sessionId, Body AS body FROM dbo.Outbox`,
    deleteSetAside: `DELETE FROM dbo.Outbox WHERE SetAsideUtc IS NOT NULL`,
  },
};

/** Each test's events have MessageIds of their own: the broker's duplicate window outlives a test. */
let run = 0;

/** Event `seq` of account `account`: its own business key, the account as its session key. */
function entry(account: number, seq: number, body: Record<string, unknown> = {}): OutboxEvent {
  return {
    type: "EntryPosted",
    key: `run-${run}:acct-${account}:${seq}`,
    sessionId: `acct-${account}`,
    body: { account, seq, ...body },
  };
}

/**
 * The relay with session keys, the same on every database: each key's rows are claimed head first, so a key's
 * events reach its session in commit order whatever the number of relays, and a key's head that cannot be sent holds
 * that key's later rows back. Received per session from a session-enabled queue on the local broker.
 */
export function outboxSessionsConformance(backend: Backend): void {
  describe(`outbox relay with session keys on ${backend.name} (real SDK, local broker, session queue)`, function () {
    this.timeout(90_000);
    const fixture = useLocalBroker(
      brokerConfig(
        Object.fromEntries(
          QUEUES.map((q) => [q, { RequiresDuplicateDetection: true, RequiresSession: true }]),
        ),
      ),
    );
    const q = sqlFor[backend.dialect];
    let db: BackendDatabase;
    let upstream: Upstream;
    let store: OutboxStore;
    let opened: OpenedOutbox = {};
    const relays: Relay[] = [];
    const senders: OutboxSender[] = [];
    let tests = 0;
    let QUEUE = QUEUES[0]!;

    beforeEach(async function () {
      run += 1;
      QUEUE = QUEUES[tests++]!;
      const label = `outbox sessions ${this.currentTest?.title ?? ""}`;
      ({ db, store, upstream } = await openOutbox(backend, label, opened));
    });

    afterEach(async function () {
      const was = opened;
      opened = {};
      await closeOutbox(was, [
        () => Promise.all(relays.splice(0).map((r) => r.stop())),
        () => Promise.all(senders.splice(0).map((s) => s.close())),
      ]);
    });

    function sender(queue = QUEUE): OutboxSender {
      const s = createOutboxSender({ client: fixture.client, queue });
      senders.push(s);
      return s;
    }

    async function relay(options: Partial<RelayOptions> = {}): Promise<Relay> {
      const r = await startRelay({
        store,
        sender: sender(),
        pollIntervalMs: 100,
        leaseMs: 3_000,
        onError: () => undefined,
        ...options,
      });
      relays.push(r);
      return r;
    }

    /** Every message of one session, in the order the session gives them: [seq, ...]. */
    async function receiveSession(account: number, n: number): Promise<number[]> {
      const session = await fixture.client.acceptSession(QUEUE, `acct-${account}`, {
        receiveMode: "receiveAndDelete",
        skipParsingBodyAsJson: true,
      });
      const got: number[] = [];
      try {
        const deadline = Date.now() + 15_000;
        while (got.length < n && Date.now() < deadline)
          for (const m of await session.receiveMessages(n - got.length, { maxWaitTimeInMs: 300 }))
            got.push((JSON.parse(Buffer.from(m.body as Uint8Array).toString("utf8")) as { seq: number }).seq);
        // Anything more would be a copy the broker failed to drop.
        for (const m of await session.receiveMessages(10, { maxWaitTimeInMs: 200 }))
          got.push((JSON.parse(Buffer.from(m.body as Uint8Array).toString("utf8")) as { seq: number }).seq);
      } finally {
        await session.close();
      }
      return got;
    }

    /** `transactions` upstream transactions, each with `perKey` events of every account, accounts interleaved. */
    async function commitInterleaved(
      accounts: number,
      transactions: number,
      perKey: number,
    ): Promise<number> {
      for (let t = 0; t < transactions; t++) {
        const events: OutboxEvent[] = [];
        for (let i = 0; i < perKey; i++)
          for (let a = 0; a < accounts; a++) events.push(entry((a + t) % accounts, t * perKey + i));
        await upstream.run([], "commit", events);
      }
      return accounts * transactions * perKey;
    }

    it("claims only the head of each key, and a key's next row once its head is marked sent", async function () {
      await upstream.run([], "commit", [
        entry(1, 0),
        entry(1, 1),
        entry(2, 0),
        { type: "Plain", key: "p", body: {} },
      ]);
      const first = await store.claim(10, 3_000, 600_000);
      assert.deepEqual(
        first.map((r) => [r.sessionId, r.type]),
        [
          ["acct-1", "EntryPosted"],
          ["acct-2", "EntryPosted"],
          [null, "Plain"],
        ],
        "acct-1's second row waits behind its head; rows without a key are claimed as before",
      );
      assert.deepEqual(await store.claim(10, 3_000, 600_000), [], "a leased head keeps its followers back");
      await store.release([first[0]!.id], 0);
      assert.deepEqual(
        (await store.claim(10, 3_000, 600_000)).map((r) => r.id),
        [first[0]!.id],
        "a released head is claimed again, not the row behind it",
      );
      await store.markSent([first[0]!.id]);
      const next = await store.claim(10, 3_000, 600_000);
      assert.equal(next.length, 1);
      assert.equal(next[0]!.sessionId, "acct-1");
      assert.ok(BigInt(next[0]!.id) > BigInt(first[0]!.id));
    });

    /**
     * Senders whose first sends wait (up to `maxWaitMs`) until each of them has a batch in hand, so that the relays
     * are shown to work side by side instead of hoping the timing gives each of them rows: under load, or on a server
     * that waits where READPAST would skip (Babelfish), one relay can otherwise drain the outbox before the other's
     * first claim. The wait stays under the lease, so no batch is claimed twice because of it.
     */
    function meetingSenders(n: number, maxWaitMs: number): { senders: OutboxSender[]; met: () => boolean } {
      const arrived = new Set<number>();
      let release!: () => void;
      const together = new Promise<void>((resolve) => (release = resolve));
      const meet = (i: number): Promise<void> => {
        arrived.add(i);
        if (arrived.size === n) release();
        return Promise.race([together, new Promise<void>((resolve) => setTimeout(resolve, maxWaitMs))]);
      };
      const senders = Array.from({ length: n }, (_, i): OutboxSender => {
        const inner = sender();
        return {
          queue: QUEUE,
          send: (rows, options) => meet(i).then(() => inner.send(rows, options)),
          close: () => Promise.resolve(),
        };
      });
      return { senders, met: () => arrived.size === n };
    }

    it("two relays with interleaved keys deliver each key's events in commit order, each once", async function () {
      const total = await commitInterleaved(5, 8, 2);
      const meeting = meetingSenders(2, 2_000);
      const started = (i: number) => relay({ batchSize: 3, sender: meeting.senders[i]!, leaseMs: 10_000 });
      const [a, b] = await Promise.all([started(0), started(1)]);
      await waitUntil(() => a.counters.sent + b.counters.sent === total, `all ${total} rows sent`, 60_000);
      assert.ok(meeting.met(), "both relays claimed a batch while the other held one");
      assert.ok(a.counters.sent > 0 && b.counters.sent > 0, "both relays sent rows");
      for (let account = 0; account < 5; account++)
        assert.deepEqual(
          await receiveSession(account, 16),
          Array.from({ length: 16 }, (_, i) => i),
          `acct-${account}'s session in commit order, each event once`,
        );
      assert.equal(await scalar(db.raw, q.unsent!), 0);
    });

    it("a failed send of a key's head holds that key's later rows back; other keys go on; nothing lost or doubled", async function () {
      const total = await commitInterleaved(4, 6, 2);
      // The first batch that holds acct-2's head goes to a queue that does not exist: a real failure, once.
      const good = sender();
      const missing = sender("no-such-queue");
      let failedAt: number | undefined;
      const log: string[] = [];
      const failingOnce: OutboxSender = {
        queue: QUEUE,
        send(rows, options) {
          if (failedAt === undefined && rows.some((r) => r.sessionId === "acct-2")) {
            // The failure counts once it happened: a send the lease left no time to start (a slow claim under
            // load) fails nothing, and the next batch with acct-2's head is failed instead.
            const at = log.length;
            return missing.send(rows, options).then((report) => {
              if (report.error !== undefined) failedAt = at;
              return report;
            });
          }
          return good.send(rows, options);
        },
        close: () => Promise.resolve(),
      };
      const watching: Partial<RelayOptions> = {
        sender: failingOnce,
        batchSize: 2,
        retryDelayMs: 1_500,
        afterSend: (ids) => void log.push(...ids),
      };
      const [a, b] = await Promise.all([relay(watching), relay(watching)]);
      await waitUntil(() => a.counters.sent + b.counters.sent === total, `all ${total} rows sent`, 60_000);
      assert.equal(a.counters.failedSends + b.counters.failedSends, 1, "one failed send");
      const { rows } = await db.raw.query<{ id: string | number; sessionId: string; body: string }>(
        q.keyOfRow!,
      );
      const rowOf = new Map(rows.map((r) => [String(r.id), r]));
      const headOf2 = rows
        .filter((r) => r.sessionId === "acct-2")
        .map((r) => String(r.id))
        .sort((x, y) => Number(x) - Number(y))[0]!;
      const headSentAt = log.indexOf(headOf2);
      assert.ok(
        log.slice(failedAt, headSentAt).some((id) => rowOf.get(id)!.sessionId !== "acct-2"),
        "other keys were sent while acct-2's head waited",
      );
      for (let account = 0; account < 4; account++)
        assert.deepEqual(
          await receiveSession(account, 12),
          Array.from({ length: 12 }, (_, i) => i),
          `acct-${account}'s session in commit order, each event once`,
        );
    });

    it("a set-aside head holds its key until an operator removes it; other keys are sent", async function () {
      await upstream.run([], "commit", [
        entry(1, 0, { text: "x".repeat(300 * 1024) }), // larger than the queue allows: set aside
        entry(1, 1),
        entry(2, 0),
        entry(1, 2),
        entry(2, 1),
      ]);
      const r = await relay();
      await waitUntil(
        () => r.counters.sent === 2 && r.counters.setAside === 1,
        "acct-2 sent, acct-1's head set aside",
      );
      assert.deepEqual(await receiveSession(2, 2), [0, 1]);
      await new Promise((resolve) => setTimeout(resolve, 500)); // several polls: acct-1's rows are still held
      assert.equal(
        await scalar(db.raw, q.unsentOfKey!, ["acct-1"]),
        3,
        "the set-aside head and the two behind it",
      );
      assert.equal(r.counters.sent, 2);
      await db.raw.query(q.deleteSetAside!);
      await waitUntil(() => r.counters.sent === 4, "acct-1's later rows sent once the head is gone");
      assert.deepEqual(await receiveSession(1, 2), [1, 2]);
    });
  });
}
