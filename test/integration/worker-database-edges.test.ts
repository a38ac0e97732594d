import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import assert from "node:assert/strict";
import { z } from "zod";
import { openDatabase, type Database } from "../../src/app/database.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { EmbeddedPostgresServer } from "../../src/embedded/postgres.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { exampleHandlers } from "../../src/example/index.ts";
import { moduleMigrations } from "../../src/app/handler-module.ts";
import { exampleModule } from "../../src/example/module.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { waitUntilSettled } from "../helpers/settled.ts";
import { appRoleDatabase, createTestDatabase } from "../helpers/postgres.ts";
import { StallProxy } from "../helpers/stall-proxy.ts";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { clientGraceMs } from "../../src/inbox/timeouts.ts";
import { countCredits, creditsPerMessage, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
const MAX_DELIVERY = 3;
const queueConfig = () =>
  brokerConfig({
    [QUEUE]: { LockDuration: "PT2S", MaxDeliveryCount: MAX_DELIVERY, RequiresDuplicateDetection: true },
  });

async function openAndPrepare(url: string): Promise<Database> {
  const db = await openDatabase(
    { kind: "postgres", url },
    {
      preCheck: true,
      maxConnections: 12,
      timeouts: { connectMs: 1_000, statementMs: 1_500, keepAliveMs: 1_000 },
    },
  );
  await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
  return db;
}

describe("worker: a handler's own network error is its failure, not a database outage", function () {
  const fixture = useLocalBroker(queueConfig());
  let db: Database;
  let worker: Worker | undefined;

  before(async () => {
    db = await openAndPrepare(await createTestDatabase("handler_network_error"));
  });
  after(async () => {
    await worker?.stop();
    await db?.close();
  });

  it("ECONNREFUSED from the handler's HTTP client: no pause, healthy messages untouched, the bad one retried by the policy and then dead-lettered", async function () {
    this.timeout(60_000);
    let calls = 0;
    const callsHttp: MessageHandler = {
      kind: "transactional",
      type: "CallsHttp",
      schema: z.object({ n: z.number() }),
      handle() {
        calls += 1;
        // What undici or a Redis client throws when its server is down; the database is healthy all along.
        return Promise.reject(
          Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6379"), { code: "ECONNREFUSED" }),
        );
      },
    };
    worker = startTestWorker({
      client: fixture.client,
      db,
      handlers: [...exampleHandlers(), callsHttp],
      maxConcurrentCalls: 4,
      // A transient failure: two quick retries in place, then RetriesExhausted (the schedule itself is tested elsewhere).
      retryPolicy: { ...defaultRetryPolicy, transientDelaysMs: [50, 50], jitter: 0 },
    });
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    await publisher.publish("CallsHttp", "bad-1", { n: 1 });
    await publisher.publishBatch(Array.from({ length: 9 }, (_, i) => demoEvent("healthy", i)));
    await waitUntil(() => worker!.stats.committed === 9, "the healthy messages commit", 10_000);
    // The retry policy calls a downstream's network error transient: retried under the lock rather than spending
    // deliveries, and never an outage of the worker's own database.
    await waitUntil(() => fixture.broker.counts(QUEUE).deadLettered === 1, "retries used up", 15_000);
    await publisher.close();
    assert.equal(calls, 3, "the bad handler ran once per attempt of the policy, no more");
    assert.equal(worker.stats.outages, 0, "the worker never paused");
    assert.deepEqual([...new Set((await creditsPerMessage(db)).values())], [1]);
    assert.equal((await worker.readiness()).ready, true);
    const dlq = fixture.client.createReceiver(QUEUE, { subQueueType: "deadLetter" });
    const [dead] = await dlq.peekMessages(1);
    await dlq.close();
    assert.equal(dead?.deadLetterReason, "RetriesExhausted");
  });
});

describe("worker: PostgreSQL refusing logins pauses receiving; nothing is dead-lettered", function () {
  const fixture = useLocalBroker(queueConfig());
  let server: EmbeddedPostgresServer;
  let logins: Awaited<ReturnType<typeof appRoleDatabase>> | undefined;
  let db: Database | undefined;
  let worker: Worker | undefined;

  before(async () => {
    server = await EmbeddedPostgresServer.create();
    logins = await appRoleDatabase(server, "logins");
    db = await openAndPrepare(logins.appUrl);
  });
  after(async () => {
    await worker?.stop();
    await db?.close();
    await logins?.admin.end();
    await server?.dispose();
  });

  it("ALTER ROLE ... NOLOGIN with its sessions ended: the worker pauses, and applies everything once logins return", async function () {
    this.timeout(60_000);
    worker = startTestWorker({
      client: fixture.client,
      db: db!,
      maxConcurrentCalls: 4,
      probeTimeoutMs: 1_000,
    });
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    await publisher.publishBatch(Array.from({ length: 5 }, (_, i) => demoEvent("before", i)));
    await waitUntil(() => worker!.stats.committed === 5, "the first messages commit", 15_000);
    await logins!.refuseLogins();
    await publisher.publishBatch(Array.from({ length: 20 }, (_, i) => demoEvent("refused", i)));
    await waitUntil(() => worker!.paused, "the worker pauses receiving", 15_000);
    // Longer than lock duration x max delivery count, so a burned delivery would show as a dead letter.
    await new Promise((resolve) => setTimeout(resolve, 2_000 * MAX_DELIVERY + 500));
    assert.equal(
      fixture.broker.counts(QUEUE).deadLettered,
      0,
      "nothing dead-lettered while logins are refused",
    );
    await logins!.allowLogins();
    await waitUntilSettled(fixture.broker, QUEUE, () => worker!.stats, 25, 30_000);
    await publisher.close();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    assert.ok(worker.stats.outages >= 1);
    const perMessage = await creditsPerMessage(db!);
    assert.equal(perMessage.size, 25);
    assert.deepEqual([...new Set(perMessage.values())], [1]);
    assert.equal(await countCredits(db!), 25);
  });
});

/** How long a statement on a silent database can keep its caller waiting, with openAndPrepare's timeouts. */
const SILENT_BOUND_MS = 1_500 + clientGraceMs(1_500);

describe("PostgreSQL inbox: a handler's statement on a database gone silent", function () {
  let proxy: StallProxy;
  let store: InboxStore | undefined;

  before(async () => {
    const url = new URL(await createTestDatabase("silent_handler"));
    proxy = await StallProxy.start(Number(url.port));
    url.port = String(proxy.port);
    store = createPostgresInboxStore({
      url: url.toString(),
      timeouts: { connectMs: 1_000, statementMs: 1_500, keepAliveMs: 1_000 },
    });
    await store.migrate();
  });
  after(async () => {
    proxy?.resume();
    await store?.close();
    await proxy?.close();
  });

  it("the outcome comes within the statement bound: no ROLLBACK is queued behind the unanswered statement", async function () {
    this.timeout(30_000);
    let stalledAt = 0;
    const outcome = await store!.process({ messageId: "silent-1", consumer: "c" }, async (tx) => {
      proxy.stall();
      stalledAt = Date.now();
      await tx.query("SELECT 1");
    });
    const waitedMs = Date.now() - stalledAt;
    assert.equal(outcome.kind === "failed" && outcome.errorClass, "unavailable");
    assert.ok(waitedMs >= SILENT_BOUND_MS - 50, `failed after ${waitedMs} ms, before the client's bound`);
    // A ROLLBACK sent after the timed-out statement would wait out a second query_timeout (twice the bound).
    assert.ok(waitedMs < SILENT_BOUND_MS + 1_000, `failed after ${waitedMs} ms`);
  });
});

describe("worker: a database that stops answering without closing connections", function () {
  const fixture = useLocalBroker(queueConfig());
  let proxy: StallProxy;
  let db: Database | undefined;
  let check: Database | undefined;
  let worker: Worker | undefined;

  before(async () => {
    const direct = await createTestDatabase("silent_database");
    const url = new URL(direct);
    proxy = await StallProxy.start(Number(url.port));
    url.port = String(proxy.port);
    db = await openAndPrepare(url.toString());
    check = await openDatabase({ kind: "postgres", url: direct }, { preCheck: false, maxConnections: 2 });
  });
  after(async () => {
    proxy?.resume();
    await worker?.stop();
    await db?.close();
    await check?.close();
    await proxy?.close();
  });

  it("pauses within the bound, resumes when forwarding returns, loses and dead-letters nothing", async function () {
    this.timeout(90_000);
    worker = startTestWorker({ client: fixture.client, db: db!, maxConcurrentCalls: 4, probeTimeoutMs: 500 });
    const total = 60;
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    await publisher.publishBatch(Array.from({ length: 20 }, (_, i) => demoEvent("silent", i)));
    await waitUntil(() => worker!.stats.committed >= 10, "some messages commit", 15_000);
    proxy.stall();
    const stalledAt = Date.now();
    await publisher.publishBatch(Array.from({ length: 40 }, (_, i) => demoEvent("silent", 20 + i)));
    // The bound: statement timeout 1.5 s plus the client's 1 s grace (the connect timeout, 1 s, is shorter);
    // the failed statement's connection is closed, not rolled back, so no second wait follows. Beyond the bound
    // only the time to notice: the 20 ms poll here, a 2-core machine shared with other test runs.
    await waitUntil(() => worker!.paused, "the worker pauses", 10_000);
    const pausedAfterMs = Date.now() - stalledAt;
    assert.ok(pausedAfterMs < SILENT_BOUND_MS + 1_000, `paused after ${pausedAfterMs} ms`);
    const ready = await worker.readiness();
    assert.equal(ready.database, "unreachable", "the probe is bounded too: it answers instead of hanging");
    await new Promise((resolve) => setTimeout(resolve, 2_000 * MAX_DELIVERY + 500));
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
    proxy.resume();
    await waitUntilSettled(fixture.broker, QUEUE, () => worker!.stats, total, 45_000);
    await waitUntil(() => !worker!.paused, "receiving resumes", 10_000);
    await publisher.close();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0, "nothing dead-lettered");
    const perMessage = await creditsPerMessage(check!);
    assert.equal(perMessage.size, total, "every message applied");
    assert.deepEqual([...new Set(perMessage.values())], [1], "none applied twice");
  });
});
