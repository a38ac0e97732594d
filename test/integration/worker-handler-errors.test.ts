import assert from "node:assert/strict";
import { z } from "zod";
import { openDatabase, type Database } from "../../src/app/database.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { appRoleDatabase, createTestDatabase } from "../helpers/postgres.ts";
import { startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
const MAX_DELIVERY = 3;
const queueConfig = () =>
  brokerConfig({
    [QUEUE]: { LockDuration: "PT5S", MaxDeliveryCount: MAX_DELIVERY, RequiresDuplicateDetection: true },
  });

const EFFECTS = `CREATE TABLE IF NOT EXISTS handler_effects (message_id text NOT NULL)`;
const RECORD = `INSERT INTO handler_effects (message_id) VALUES ($1)`;

async function effectsPerMessage(sql: Database["sql"]): Promise<number[]> {
  const { rows } = await sql.query<{ n: string }>(
    `SELECT count(*) AS n FROM handler_effects GROUP BY message_id ORDER BY message_id`,
  );
  return rows.map((r) => Number(r.n));
}

describe("worker: a handler that wraps its transaction's error when PostgreSQL refuses logins", function () {
  const fixture = useLocalBroker(queueConfig());
  let server: EmbeddedPostgresServer;
  let logins: Awaited<ReturnType<typeof appRoleDatabase>> | undefined;
  let db: Database | undefined;
  let worker: Worker | undefined;

  before(async () => {
    server = await EmbeddedPostgresServer.create();
    logins = await appRoleDatabase(server, "wrapped_logins");
    // A statement timeout well above the handler's sleep: the session is ended by the test, not by the timeout.
    db = await openDatabase(
      { kind: "postgres", url: logins.appUrl },
      {
        preCheck: true,
        maxConnections: 4,
        timeouts: { connectMs: 1_000, statementMs: 20_000, keepAliveMs: 1_000 },
      },
    );
    await db.store.migrate();
    await db.sql.query(EFFECTS);
  });
  after(async () => {
    await worker?.stop();
    await db?.close();
    await logins?.admin.end();
    await server?.dispose();
  });

  it("the wrapped 57P01 pauses the worker at once: no retry spent, nothing dead-lettered, applied once after", async function () {
    this.timeout(60_000);
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    let first = true;
    const wraps: MessageHandler = {
      kind: "transactional",
      type: "WrapsErrors",
      schema: z.object({ n: z.number() }),
      async handle(_body, tx, context) {
        try {
          await tx.query(RECORD, [context.messageId]);
          if (first) {
            first = false;
            entered();
            await tx.query(`SELECT pg_sleep(15)`); // ended by the test's pg_terminate_backend
          }
        } catch (error) {
          // What handler code often does: add context, keep the original as the cause.
          throw new Error("could not record the order", { cause: error });
        }
      },
    };
    worker = startTestWorker({ client: fixture.client, db: db!, handlers: [wraps], probeTimeoutMs: 1_000 });
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    await publisher.publish("WrapsErrors", "w-1", { n: 1 });
    await inside;
    await logins!.refuseLogins();
    await waitUntil(() => worker!.paused, "the worker pauses receiving", 15_000);
    assert.equal(worker.stats.retriesWaited + worker.stats.retriesScheduled, 0, "the outage spent no retry");
    await logins!.allowLogins();
    await waitUntil(() => worker!.stats.committed === 1, "the message applies once logins return", 30_000);
    await publisher.close();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    assert.equal(worker.stats.retriesWaited + worker.stats.retriesScheduled, 0);
    assert.ok(worker.stats.outages >= 1);
    assert.deepEqual(await effectsPerMessage(db!.sql), [1]);
  });
});

describe("worker: a handler's downstream down for 5 s, with the default retry policy", function () {
  const fixture = useLocalBroker(queueConfig());
  let db: Database;
  let worker: Worker | undefined;

  before(async () => {
    db = await openDatabase(
      { kind: "postgres", url: await createTestDatabase("downstream_down") },
      { preCheck: true, maxConnections: 4 },
    );
    await db.store.migrate();
    await db.sql.query(EFFECTS);
  });
  after(async () => {
    await worker?.stop();
    await db?.close();
  });

  it("fetch failed (ECONNREFUSED as its cause) is retried, never an outage: applied once, nothing dead-lettered", async function () {
    this.timeout(60_000);
    let downUntil = 0;
    let calls = 0;
    const callsDownstream: MessageHandler = {
      kind: "transactional",
      type: "CallsDownstream",
      schema: z.object({ n: z.number() }),
      async handle(_body, tx, context) {
        calls += 1;
        await tx.query(RECORD, [context.messageId]);
        // What undici's fetch throws when its server refuses the connection.
        if (Date.now() < downUntil)
          throw new TypeError("fetch failed", { cause: { code: "ECONNREFUSED", syscall: "connect" } });
      },
    };
    worker = startTestWorker({
      client: fixture.client,
      db,
      handlers: [callsDownstream],
      retryPolicy: defaultRetryPolicy,
    });
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    downUntil = Date.now() + 5_000;
    await publisher.publish("CallsDownstream", "d-1", { n: 1 });
    await waitUntil(
      () => worker!.stats.committed === 1,
      "the message applies once the downstream is back",
      30_000,
    );
    await publisher.close();
    assert.ok(calls >= 2, `the handler ran ${calls} times`);
    assert.equal(worker.stats.outages, 0, "the worker never paused");
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    assert.deepEqual(await effectsPerMessage(db.sql), [1], "applied once: the failed attempts rolled back");
  });
});
