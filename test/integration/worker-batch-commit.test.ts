import assert from "node:assert/strict";
import type { Database } from "../../src/app/database.ts";
import { ACCOUNT_CREDITED } from "../../src/example/index.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

/** A queue per test: what one test leaves behind (it failed half-way) never reaches the next. */
const QUEUES = { killed: "batch-killed", severed: "batch-severed" } as const;
const TOTAL = 16;

/**
 * A deferred constraint trigger runs inside COMMIT: a credit to account "slow" keeps its transaction's COMMIT
 * running (pg_sleep) long enough for the test to see it and strike then.
 */
const SLOW_COMMIT = `
CREATE OR REPLACE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON example_credits DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.account_id = 'slow') EXECUTE FUNCTION slow_commit();`;

/** The backend pid of a session of this database whose COMMIT is running the trigger's sleep. */
const COMMITTING = `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND state = 'active' AND query = 'COMMIT' AND wait_event = 'PgSleep'`;

/** Whether that backend still exists (it may have left the sleep and still be writing the commit's WAL). */
const BACKEND = "SELECT 1 FROM pg_stat_activity WHERE pid = $1";

describe("group commit: a batch's COMMIT struck while it runs (real SDK, local broker, PostgreSQL)", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker(
    brokerConfig(
      Object.fromEntries(
        Object.values(QUEUES).map((q) => [
          q,
          { LockDuration: "PT2S", MaxDeliveryCount: 10, RequiresDuplicateDetection: true },
        ]),
      ),
    ),
  );
  let db: Database & { url: string };

  beforeEach(async function () {
    db = await exampleDatabase(`batch_commit_${this.currentTest?.title.slice(0, 8).replace(/\W/g, "_")}`);
    await db.sql.query(SLOW_COMMIT);
  });
  afterEach(async () => {
    await db.close();
  });

  async function publish(queue: string, prefix: string): Promise<string[]> {
    const publisher = createPublisher({ client: fixture.client, queue });
    const ids: string[] = [];
    for (let i = 0; i < TOTAL; i += 1) {
      const { messageId } = await publisher.publish(ACCOUNT_CREDITED, `${prefix}-${i}`, {
        // One slow message in the middle, so that it shares its batch with others.
        accountId: i === 3 ? "slow" : `${prefix}-acct`,
        amount: 1,
      });
      ids.push(messageId);
    }
    await publisher.close();
    return ids;
  }

  async function committingPid(): Promise<number> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const { rows } = await db.sql.query<{ pid: number }>(COMMITTING);
      if (rows[0]) return rows[0].pid;
      if (Date.now() > deadline) throw new Error("timed out waiting for a COMMIT in the slow trigger");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /**
   * Until the struck backend has exited. Its client is dead, so it exits once it has finished the COMMIT and
   * finds the socket closed; leaving the sleep is not enough (it may still be flushing the commit).
   */
  async function backendGone(pid: number): Promise<void> {
    const deadline = Date.now() + 30_000;
    while ((await db.sql.query(BACKEND, [pid])).rows.length > 0) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for backend ${pid} to exit`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  const queueEmpty = (queue: string) => () =>
    fixture.broker.counts(queue).active + fixture.broker.counts(queue).locked === 0;

  it("the worker process is SIGKILLed during its batch's COMMIT: after a restart every message has one effect", async function () {
    const queue = QUEUES.killed;
    const ids = await publish(queue, "killed");
    const { child, done } = startCli(["worker"], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: queue,
      SBINBOX_POSTGRES_URL: db.url,
      PORT: "0",
      SBINBOX_HTTP_HOST: "127.0.0.1",
      SBINBOX_BATCH_SIZE: "8",
      SBINBOX_BATCH_WAIT_MS: "100",
      SBINBOX_LOG_LEVEL: "warn",
    });
    const pid = await committingPid();
    child.kill("SIGKILL");
    const result = await done;
    assert.equal(result.signal, "SIGKILL");
    // The server finishes the COMMIT it was running: the client's death is not seen until it answers.
    await backendGone(pid);
    const before = await creditsPerMessage(db);
    assert.equal(before.get(ids[3]!), 1, "the struck batch's COMMIT took effect");
    const { rows } = await db.sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM example_credits
       WHERE xmin = (SELECT xmin FROM example_credits WHERE account_id = 'slow')`,
    );
    assert.ok(Number(rows[0]?.n) > 1, `the struck COMMIT was a batch's (${rows[0]?.n} credits in it)`);
    const next = startTestWorker({ client: fixture.client, db, queue, consumer: "sbinbox", batchSize: 8 });
    try {
      await waitUntil(queueEmpty(queue), "the queue is empty", 30_000);
      assert.ok(next.stats.duplicate >= 1, "the committed batch's messages come back as duplicates");
    } finally {
      await next.stop();
    }
    const perMessage = await creditsPerMessage(db);
    for (const id of ids) assert.equal(perMessage.get(id), 1, id);
    assert.equal(fixture.broker.counts(queue).deadLettered, 0);
  });

  it("the batch's connection is terminated during its COMMIT: its messages go one by one, each applied once", async function () {
    const queue = QUEUES.severed;
    const ids = await publish(queue, "severed");
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue,
      maxConcurrentCalls: 16,
      batchSize: 8,
      batchWaitMs: 100,
    });
    try {
      const pid = await committingPid();
      await db.sql.query("SELECT pg_terminate_backend($1)", [pid]);
      await waitUntil(() => worker.stats.settled === TOTAL && queueEmpty(queue)(), "all settled", 30_000);
      assert.equal(worker.stats.committed, TOTAL);
      assert.equal(worker.stats.failed, 0);
    } finally {
      await worker.stop();
    }
    const perMessage = await creditsPerMessage(db);
    for (const id of ids) assert.equal(perMessage.get(id), 1, id);
    assert.equal(fixture.broker.counts(queue).deadLettered, 0);
  });
});
