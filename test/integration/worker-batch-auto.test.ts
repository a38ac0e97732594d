import assert from "node:assert/strict";
import pg from "pg";
import type { Database } from "../../src/app/database.ts";
import type { TransactionalHandler } from "../../src/domain/handler.ts";
import {
  ACCOUNT_CREDITED,
  accountCreditedHandler,
  accountCreditedSchema,
  accountCreditedStatementsHandler,
  accountSql,
  type AccountCredited,
} from "../../src/example/index.ts";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import { postgresPoolConfig } from "../../src/inbox/postgres/pool.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { autoBatchSize, type Worker } from "../../src/worker/worker.ts";
import { recordingBatches } from "../helpers/recording-batches.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";
const MESSAGES = 48;

/** The example's credit without its keys: it may touch any row, so auto never batches it. */
function unkeyedCredit(): TransactionalHandler<AccountCredited> {
  return {
    kind: "transactional",
    type: ACCOUNT_CREDITED,
    schema: accountCreditedSchema,
    async handle(body, tx, context) {
      await tx.query(accountSql.insertCredit[tx.dialect], [context.messageId, body.accountId, body.amount]);
      await tx.query(accountSql.addToBalance[tx.dialect], [body.accountId, body.amount]);
    },
  };
}

describe("SBINBOX_BATCH_SIZE=auto, the default (real SDK, local broker, PostgreSQL)", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT10S", MaxDeliveryCount: 5, RequiresDuplicateDetection: true },
    }),
  );
  let db: Database & { url: string };
  const workers: Worker[] = [];
  const pools: pg.Pool[] = [];

  before(async () => {
    db = await exampleDatabase("worker_batch_auto");
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await takeDeadLetters(fixture.client, QUEUE);
  });
  after(async () => {
    for (const pool of pools) await pool.end();
    await db.close();
  });

  const counts = () => fixture.broker.counts(QUEUE);
  const settledAll = () => counts().active + counts().locked === 0;

  /** A backlog of credits over 12 accounts, published before the worker starts so that batches can form. */
  async function backlog(prefix: string): Promise<string[]> {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const ids: string[] = [];
    for (let i = 0; i < MESSAGES; i += 1)
      ids.push(
        (
          await publisher.publish(ACCOUNT_CREDITED, `${prefix}-${i}`, {
            accountId: `${prefix}-${i % 12}`,
            amount: 1,
          })
        ).messageId,
      );
    await publisher.close();
    return ids;
  }

  async function drain(
    prefix: string,
    store: InboxStore,
    extra: Partial<Parameters<typeof startTestWorker>[0]>,
  ): Promise<{ sizes: number[] }> {
    const ids = await backlog(prefix);
    const recorded = recordingBatches(store);
    const worker = startTestWorker({
      client: fixture.client,
      db: { ...db, store: recorded.store },
      maxConcurrentCalls: 16,
      // The worker's own default (startTestWorker's is 1).
      batchSize: undefined,
      ...extra,
    });
    workers.push(worker);
    await waitUntil(() => worker.stats.settled === MESSAGES && settledAll(), `all ${MESSAGES} settled`);
    // Stopped here, so that a second drain in the same test is this worker's alone.
    await workers.pop()!.stop();
    const applied = await creditsPerMessage(db);
    for (const id of ids) assert.equal(applied.get(id), 1, `${id} applied once`);
    assert.equal(counts().deadLettered, 0, "nothing dead-lettered");
    return { sizes: recorded.sizes };
  }

  it("half of the calls in flight, none below 4", function () {
    assert.equal(autoBatchSize({}), 8, "the worker's default of 16 calls");
    assert.equal(autoBatchSize({ maxConcurrentCalls: 32 }), 16);
    assert.equal(autoBatchSize({ maxConcurrentCalls: 5 }), 2);
    assert.equal(autoBatchSize({ maxConcurrentCalls: 3 }), 1);
    assert.equal(
      autoBatchSize({ maxConcurrentCalls: 16, sessions: { maxSessions: 6 } }),
      3,
      "one per session",
    );
  });

  it("keyed code handlers on a store that pipelines: batches of up to half the calls, each credit once", async function () {
    const { sizes } = await drain("auto-keyed", db.store, { handlers: [accountCreditedHandler()] });
    assert.ok(
      sizes.some((n) => n > 1),
      `batches of several formed (${sizes.join(",")})`,
    );
    assert.ok(Math.max(...sizes) <= 8, `no batch above 8 (${sizes.join(",")})`);
  });

  it("a handler that declares no keys goes one transaction a message: no batch", async function () {
    const { sizes } = await drain("auto-unkeyed", db.store, { handlers: [unkeyedCredit()] });
    assert.deepEqual(sizes, []);
  });

  it("SBINBOX_BATCH_SIZE=1 turns batches off for keyed handlers too", async function () {
    const { sizes } = await drain("auto-off", db.store, {
      handlers: [accountCreditedHandler()],
      batchSize: 1,
    });
    assert.deepEqual(sizes, []);
  });

  it("a store that runs a batch's handlers one after another (as SQL Server): keyed statements handlers batch, code handlers do not", async function () {
    // The real PostgreSQL store on a pool that does not pipeline: the driver says so, as mssql's does.
    const pool = new pg.Pool({ ...postgresPoolConfig(db.url, 20), pipeline: false });
    pools.push(pool);
    const serial = createPostgresInboxStore({ pool, preCheck: "redeliveries" });
    assert.equal(serial.handlersSideBySide, false);
    assert.equal(db.store.handlersSideBySide, true);
    const code = await drain("auto-serial-code", serial, { handlers: [accountCreditedHandler()] });
    assert.deepEqual(code.sizes, [], "code handlers alone");
    const statements = await drain("auto-serial-statements", serial, {
      handlers: [accountCreditedStatementsHandler()],
    });
    assert.ok(
      statements.sizes.some((n) => n > 1),
      `statements handlers in batches (${statements.sizes.join(",")})`,
    );
  });
});
