import assert from "node:assert/strict";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { StatementsHandler } from "../../src/domain/handler.ts";
import { ACCOUNT_CREDITED, accountCreditedStatementsHandler, accountSql } from "../../src/example/index.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { recordingBatches } from "../helpers/recording-batches.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";

describe("worker with statements handlers in batches (real SDK, local broker, PostgreSQL)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT5S", MaxDeliveryCount: 5, RequiresDuplicateDetection: true },
    }),
  );
  let db: Database & { url: string };
  const workers: Worker[] = [];

  before(async () => {
    db = await exampleDatabase("worker_batch_statements");
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await takeDeadLetters(fixture.client, QUEUE);
  });
  after(async () => db.close());

  const counts = () => fixture.broker.counts(QUEUE);
  const settledAll = () => counts().active + counts().locked === 0;

  async function publish(type: string, bodies: readonly object[], prefix: string): Promise<string[]> {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const ids: string[] = [];
    for (const [i, body] of bodies.entries())
      ids.push((await publisher.publish(type, `${prefix}-${i}`, body)).messageId);
    await publisher.close();
    return ids;
  }

  function start(store: InboxStore, extra: Partial<Parameters<typeof startTestWorker>[0]> = {}): Worker {
    const worker = startTestWorker({
      client: fixture.client,
      db: { ...db, store },
      maxConcurrentCalls: 16,
      batchSize: 8,
      batchWaitMs: 50,
      handlers: [accountCreditedStatementsHandler()],
      retryPolicy: {
        transientDelaysMs: [20],
        permanentDelaysMs: [20],
        jitter: 0,
        maxInProcessWaitMs: 1_000,
        lockMarginMs: 500,
      },
      ...extra,
    });
    workers.push(worker);
    return worker;
  }

  it("the example's credits as statements: batches commit whole, each credit applied once, balances right", async () => {
    const bodies = Array.from({ length: 24 }, (_, i) => ({ accountId: `st-${i % 3}`, amount: i + 1 }));
    const ids = await publish(ACCOUNT_CREDITED, bodies, "st");
    const { store, batches } = recordingBatches(db.store);
    const worker = start(store);
    await waitUntil(() => worker.stats.settled === 24 && settledAll(), "all 24 settled");
    assert.ok(
      batches.some((b) => b.items.length > 1 && b.result.failure === undefined),
      `a batch of several committed whole (${batches.map((b) => `${b.items.length}:${b.result.reason ?? "ok"}`).join(",")})`,
    );
    assert.ok(
      batches.every((b) => b.items.every((i) => i.statements?.length === 2)),
      "every item carried its two statements as data",
    );
    assert.equal(worker.stats.committed, 24);
    const credits = await creditsPerMessage(db);
    for (const id of ids) assert.equal(credits.get(id), 1, id);
    const { rows } = await db.sql.query<{ account_id: string; balance: string }>(
      "SELECT account_id, balance FROM example_accounts WHERE account_id LIKE 'st-%' ORDER BY account_id",
    );
    const expected = [0, 1, 2].map((a) =>
      bodies.filter((_, i) => i % 3 === a).reduce((s, b) => s + b.amount, 0),
    );
    assert.deepEqual(
      rows.map((r) => Number(r.balance)),
      expected,
    );
  });

  it("a failing statement in a batch: the others applied once, the failing one retried per policy, then dead-lettered", async () => {
    const TYPE = "CreditOrNull";
    const schema = z.object({ n: z.number(), fail: z.boolean() });
    let asked = 0;
    const failing: StatementsHandler<z.infer<typeof schema>> = {
      kind: "statements",
      type: TYPE,
      schema,
      statements(body, context) {
        if (body.fail) asked += 1;
        // amount NULL: the NOT NULL column refuses it (23502), a permanent failure of this message only.
        return [
          {
            sql: accountSql.insertCredit,
            params: [context.messageId, "fail-acct", body.fail ? null : body.n],
          },
        ];
      },
    };
    const ids = await publish(
      TYPE,
      Array.from({ length: 8 }, (_, n) => ({ n: n + 1, fail: n === 3 })),
      "fail",
    );
    const { store, batches } = recordingBatches(db.store);
    const worker = start(store, { handlers: [failing] });
    await waitUntil(() => worker.stats.settled === 8 && settledAll(), "all 8 settled");
    assert.ok(
      batches.some((b) => b.result.reason === "handler_error"),
      "the batch holding it rolled back as a handler's failure",
    );
    assert.equal(worker.stats.committed, 7);
    // Attempt 1 (in the batch, then alone), one retry waited in place (permanent: one retry), then RetriesExhausted.
    assert.equal(worker.stats.retriesWaited, 1);
    assert.ok(asked >= 2, `the failing message's statements were asked for on each attempt (${asked})`);
    const dead = await takeDeadLetters(fixture.client, QUEUE);
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.deadLetterReason]),
      [[ids[3], "RetriesExhausted"]],
    );
    const credits = await creditsPerMessage(db);
    for (const [i, id] of ids.entries()) assert.equal(credits.get(id), i === 3 ? undefined : 1, id);
  });

  it("statements a handler gets wrong are dead-lettered at once as NotRetryable, naming the handler", async () => {
    const TYPE = "NoPostgresText";
    const wrong: StatementsHandler<unknown> = {
      kind: "statements",
      type: TYPE,
      schema: z.unknown(),
      statements: () => [{ sql: { sqlserver: "SELECT 1" } as unknown as string }],
    };
    const [id] = await publish(TYPE, [{}], "wrong");
    const worker = start(db.store, { handlers: [wrong] });
    await waitUntil(() => worker.stats.settled === 1 && settledAll(), "settled");
    const dead = await takeDeadLetters(fixture.client, QUEUE);
    assert.equal(dead.length, 1);
    assert.equal(dead[0]!.messageId, id);
    assert.equal(dead[0]!.deadLetterReason, "NotRetryable");
    assert.match(
      String(dead[0]!.deadLetterErrorDescription),
      /statements handler "NoPostgresText": statement 1 has no SQL text for postgres/,
    );
    assert.equal(worker.stats.retriesWaited, 0);
  });
});
