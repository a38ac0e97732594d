import assert from "node:assert/strict";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { TransactionalHandler } from "../../src/domain/handler.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { recordingBatches } from "../helpers/recording-batches.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";

describe("group commit with keys (real SDK, local broker, PostgreSQL)", function () {
  this.timeout(90_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT10S", MaxDeliveryCount: 5, RequiresDuplicateDetection: true },
    }),
  );
  let db: Database & { url: string };
  const workers: Worker[] = [];

  before(async () => {
    db = await exampleDatabase("worker_batch_keys");
    // Per account, each message's sequence number and the one it saw last: its order of application.
    await db.sql.query(
      "CREATE TABLE key_order (n bigserial PRIMARY KEY, account text NOT NULL, seq int NOT NULL, prev int, message_id text NOT NULL)",
    );
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await takeDeadLetters(fixture.client, QUEUE);
  });
  after(async () => {
    await db.close();
  });

  const counts = () => fixture.broker.counts(QUEUE);
  const settledAll = () => counts().active + counts().locked === 0;

  function start(store: InboxStore, extra: Partial<Parameters<typeof startTestWorker>[0]>): Worker {
    const worker = startTestWorker({ client: fixture.client, db: { ...db, store }, ...extra });
    workers.push(worker);
    return worker;
  }

  async function publishAll(
    type: string,
    bodies: readonly { key: string; body: object }[],
  ): Promise<string[]> {
    const publisher = createPublisher({ client: fixture.client, queue: QUEUE });
    const ids: string[] = [];
    // One after another: the broker's order is the order of the sequence numbers.
    for (const { key, body } of bodies) ids.push((await publisher.publish(type, key, body)).messageId);
    await publisher.close();
    return ids;
  }

  it("per key, messages apply in arrival order, inside a batch and across batches in flight", async function () {
    const sequencedSchema = z.object({ account: z.string(), seq: z.number().int() });
    const sequenced: TransactionalHandler<z.infer<typeof sequencedSchema>> = {
      kind: "transactional",
      type: "Sequenced",
      schema: sequencedSchema,
      keys: (body) => `acct:${body.account}`,
      // Read, then write: a message of the same account run beside this one would read before it writes. The read
      // takes 5 ms, so that later batches form while one runs.
      async handle(body, tx, context) {
        // Fails its batch once: the batch's other messages then go alone, still in order per key.
        if (body.account === "fails-once" && context.attempt === 1) throw new Error("fails on attempt 1");
        const { rows } = await tx.query<{ prev: number | null }>(
          "SELECT max(seq) AS prev FROM key_order, pg_sleep(0.005) WHERE account = $1",
          [body.account],
        );
        await tx.query("INSERT INTO key_order (account, seq, prev, message_id) VALUES ($1, $2, $3, $4)", [
          body.account,
          body.seq,
          rows[0]?.prev ?? null,
          context.messageId,
        ]);
      },
    };
    // Two of one account, then two of the next: a batch of 4 holds two keys twice; six accounts, so the batches
    // in flight meet the same accounts again a few batches later.
    const ACCOUNTS = 6;
    const ROUNDS = 10;
    const bodies: { key: string; body: object }[] = [];
    const next = new Map<string, number>();
    for (let round = 0; round < ROUNDS; round += 1)
      for (let a = 0; a < ACCOUNTS; a += 1)
        for (let twice = 0; twice < 2; twice += 1) {
          const account = `a${a}`;
          const seq = (next.get(account) ?? 0) + 1;
          next.set(account, seq);
          bodies.push({ key: `${account}-${seq}`, body: { account, seq } });
        }
    bodies.splice(30, 0, { key: "fails-once-1", body: { account: "fails-once", seq: 1 } });
    await publishAll("Sequenced", bodies);
    const { store, batches, most } = recordingBatches(db.store);
    const worker = start(store, {
      handlers: [sequenced],
      maxConcurrentCalls: 32,
      batchSize: 4,
      batchWaitMs: 20,
      batchMaxInFlight: 3,
      retryPolicy: {
        transientDelaysMs: [20],
        permanentDelaysMs: [20],
        jitter: 0,
        maxInProcessWaitMs: 1_000,
        lockMarginMs: 500,
      },
    });
    await waitUntil(() => worker.stats.settled === bodies.length && settledAll(), "all settled", 60_000);
    assert.equal(worker.stats.committed, bodies.length);
    const { rows } = await db.sql.query<{ account: string; seq: number; prev: number | null }>(
      "SELECT account, seq, prev FROM key_order ORDER BY n",
    );
    assert.equal(rows.length, bodies.length, "each message applied once");
    const failed = batches.filter((b) => b.result.failure !== undefined).map((b) => b.result.reason);
    for (const row of rows)
      assert.equal(
        row.prev,
        row.seq === 1 ? null : row.seq - 1,
        `${row.account} #${row.seq} saw #${row.prev} (batches that failed: ${failed.join(",") || "none"})`,
      );
    // What the run went through (else the order above would prove nothing about batches).
    const keyed = batches.filter((b) => b.result.failure === undefined && b.keys.length > 1);
    assert.ok(
      keyed.some((b) => new Set(b.keys.map((k) => k?.[0])).size < b.keys.length),
      "a batch held two messages of one account",
    );
    assert.ok(most() >= 2, `batches ran side by side (at most ${most()} at once)`);
    assert.deepEqual(failed, ["handler_error"], "one batch failed, and its messages went alone");
    assert.ok(
      batches.every((b) => b.result.reason !== "deadlock"),
      "no batch was a deadlock's victim",
    );
  });

  it("a failing statement in a pipelined batch: the others apply once, the failing one is retried per its policy", async function () {
    const schema = z.object({ n: z.number(), fail: z.boolean() });
    const codes: string[] = [];
    const pipeFlaky: TransactionalHandler<z.infer<typeof schema>> = {
      kind: "transactional",
      type: "PipeFlaky",
      schema,
      keys: (body) => `pipe:${body.n}`,
      async handle(body, tx, context) {
        try {
          // Division by zero on attempts 1 and 2 of the failing one: the server aborts the transaction, and every
          // statement pipelined behind it fails as well (25P02).
          await tx.query("SELECT 1 / $1::int AS x", [body.fail && context.attempt < 3 ? 0 : 1]);
          await tx.query("INSERT INTO example_credits (account_id, amount, message_id) VALUES ($1, $2, $3)", [
            `pipe-${body.n}`,
            1,
            context.messageId,
          ]);
        } catch (error) {
          codes.push(String((error as { code?: unknown }).code));
          throw error;
        }
      },
    };
    const ids = await publishAll(
      "PipeFlaky",
      Array.from({ length: 12 }, (_, n) => ({ key: `pipe-${n}`, body: { n, fail: n === 4 } })),
    );
    const { store, batches } = recordingBatches(db.store);
    const worker = start(store, {
      handlers: [pipeFlaky],
      maxConcurrentCalls: 16,
      batchSize: 12,
      batchWaitMs: 500,
      retryPolicy: {
        transientDelaysMs: [20, 20],
        permanentDelaysMs: [20, 20],
        jitter: 0,
        maxInProcessWaitMs: 1_000,
        lockMarginMs: 500,
      },
    });
    await waitUntil(() => worker.stats.settled === 12 && settledAll(), "all 12 settled", 30_000);
    assert.equal(batches[0]?.keys.length, 12, "the twelve formed one batch");
    assert.equal(batches[0]?.result.reason, "handler_error");
    assert.ok(codes.includes("22012"), `the failing statement (${codes.join(",")})`);
    assert.ok(
      codes.includes("25P02"),
      `statements pipelined behind it failed with the aborted transaction (${codes.join(",")})`,
    );
    assert.equal(worker.stats.retriesWaited, 2, "two retries waited in place, per the policy");
    assert.equal(worker.stats.committed, 12);
    assert.equal(worker.stats.failed, 0);
    const credits = await creditsPerMessage(db);
    for (const id of ids) assert.equal(credits.get(id), 1, id);
    assert.equal(counts().deadLettered, 0);
  });

  it("a handler whose keys() throws or gives no key: dead-lettered at once as NotRetryable, naming the handler", async function () {
    const schema = z.object({ mode: z.string() });
    const given: Record<string, () => unknown> = {
      throws: () => {
        throw new Error("no account in this body");
      },
      empty: () => "",
      none: () => [],
      number: () => 42,
      holey: () => ["k:1", ""],
      ok: () => ["k:ok", "k:ok2"],
    };
    const badKeys: TransactionalHandler<z.infer<typeof schema>> = {
      kind: "transactional",
      type: "BadKeys",
      schema,
      keys: (body) => given[body.mode]!() as string,
      async handle(body, tx, context) {
        await tx.query("INSERT INTO example_credits (account_id, amount, message_id) VALUES ($1, 1, $2)", [
          `bad-${body.mode}`,
          context.messageId,
        ]);
      },
    };
    const modes = Object.keys(given);
    const ids = await publishAll(
      "BadKeys",
      modes.map((mode) => ({ key: `bad-${mode}`, body: { mode } })),
    );
    const worker = start(db.store, { handlers: [badKeys], maxConcurrentCalls: 8, batchSize: 4 });
    await waitUntil(() => worker.stats.settled === modes.length && settledAll(), "all settled");
    assert.equal(worker.stats.committed, 1);
    const dead = await takeDeadLetters(fixture.client, QUEUE);
    const byMode = new Map(dead.map((m) => [modes[ids.indexOf(String(m.messageId))], m]));
    assert.deepEqual([...byMode.keys()].sort(), ["empty", "holey", "none", "number", "throws"]);
    const expected: Record<string, RegExp> = {
      throws: /threw Error: no account in this body/,
      empty: /returned an empty string/,
      none: /returned an empty array/,
      number: /returned number 42, not a string or an array of strings/,
      holey: /returned an empty string at index 1/,
    };
    for (const [mode, message] of byMode) {
      assert.equal(message.deadLetterReason, "NotRetryable", mode);
      const description = String(message.deadLetterErrorDescription);
      assert.match(description, /InvalidKeysError: the handler of "BadKeys": keys\(\)/, mode);
      assert.match(description, expected[mode!]!, mode);
    }
    const credits = await creditsPerMessage(db);
    for (const [i, id] of ids.entries()) assert.equal(credits.get(id), modes[i] === "ok" ? 1 : undefined, id);
  });
});
