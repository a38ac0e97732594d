import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import type { MessageContext, MessageHandler } from "../../src/domain/handler.ts";
import { localConnectionString } from "../../src/localbroker/broker.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";
import { StallProxy } from "../helpers/stall-proxy.ts";
import { exampleDatabase, startTestWorker, type TestWorkerOptions } from "../helpers/worker.ts";

const ORDERED = "ordered";
const FAILING = "ordered-failing";
const KILLED = "ordered-killed";

/** Each step of an account, applied in the handler's transaction; `fail` may refuse a step for now. */
function stepHandler(
  fail: (account: string, seq: number, context: MessageContext) => Error | undefined = () => undefined,
): MessageHandler {
  return {
    kind: "transactional",
    type: "Step",
    schema: z.object({ account: z.string(), seq: z.number() }),
    async handle(body, tx, context) {
      const { account, seq } = body as { account: string; seq: number };
      const error = fail(account, seq, context);
      if (error) throw error;
      await tx.query("INSERT INTO session_steps (account, seq, message_id) VALUES ($1, $2, $3)", [
        account,
        seq,
        context.messageId,
      ]);
    },
  };
}

async function sendSteps(
  client: ServiceBusClient,
  queue: string,
  accounts: string[],
  steps: number,
): Promise<number> {
  const sender = client.createSender(queue);
  let sent = 0;
  try {
    // Interleaved: account 0's step 0, account 1's step 0, ..., then every account's step 1.
    for (let seq = 0; seq < steps; seq++) {
      const messages = accounts.map((account) => ({
        messageId: `${account}-${seq}`,
        sessionId: account,
        subject: "Step",
        body: Buffer.from(JSON.stringify({ account, seq })),
      }));
      for (let i = 0; i < messages.length; i += 50) await sender.sendMessages(messages.slice(i, i + 50));
      sent += messages.length;
    }
  } finally {
    await sender.close();
  }
  return sent;
}

function createStepsTable(db: Database): Promise<unknown> {
  return db.sql.query(
    "CREATE TABLE session_steps (id bigserial PRIMARY KEY, account text NOT NULL, seq int NOT NULL, message_id text NOT NULL)",
  );
}

/** Out of order per account, read from the database: a step applied after a later one, or twice. */
async function outOfOrder(
  db: Database,
  prefix: string,
): Promise<{ outOfOrder: number; rows: number; doubled: number }> {
  const { rows } = await db.sql.query<{ account: string; seq: number; message_id: string }>(
    "SELECT account, seq, message_id FROM session_steps WHERE account LIKE $1 ORDER BY id",
    [`${prefix}%`],
  );
  const last = new Map<string, number>();
  const seen = new Set<string>();
  let bad = 0;
  let doubled = 0;
  for (const row of rows) {
    if ((last.get(row.account) ?? -1) !== row.seq - 1) bad += 1;
    last.set(row.account, row.seq);
    if (seen.has(row.message_id)) doubled += 1;
    seen.add(row.message_id);
  }
  return { outOfOrder: bad, rows: rows.length, doubled };
}

describe("worker in session mode: each account's events applied in order, exactly once", function () {
  const fixture = useLocalBroker(
    brokerConfig({
      [ORDERED]: { RequiresSession: true, LockDuration: "PT5S" },
      [FAILING]: { RequiresSession: true, LockDuration: "PT5S" },
      [KILLED]: { RequiresSession: true, LockDuration: "PT2S" },
      plain: {},
    }),
  );
  let db: Database;
  const workers: Worker[] = [];

  before(async () => {
    db = await exampleDatabase("worker_sessions");
    await createStepsTable(db);
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
  });
  after(async () => {
    await db.close();
  });

  /** Sends `steps` per account (`prefix`0, 1, ...), drains them with one session worker, and checks the order. */
  async function drainInOrder(
    prefix: string,
    accountCount: number,
    steps: number,
    options: Partial<TestWorkerOptions> = {},
  ): Promise<void> {
    const accounts = Array.from({ length: accountCount }, (_, i) => `${prefix}${i}`);
    const sent = await sendSteps(fixture.client, ORDERED, accounts, steps);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: ORDERED,
      handlers: [stepHandler()],
      sessions: { maxSessions: 8, idleMs: 300 },
      ...options,
    });
    workers.push(worker);
    await waitUntil(() => worker.stats.settled === sent, `all ${sent} settled`, 50_000);
    assert.deepEqual(await outOfOrder(db, prefix), { outOfOrder: 0, rows: sent, doubled: 0 });
  }

  it("keeps order per session with 8 sessions at once across 50 sessions", async function () {
    await drainInOrder("conc-", 50, 6);
    const counts = fixture.broker.counts(ORDERED);
    assert.equal(counts.active + counts.locked + counts.deadLettered, 0);
  });

  it("with group commit on (batch size 8 over 8 sessions), each session keeps its order, nothing doubled", async function () {
    await drainInOrder("batch-", 16, 5, { batchSize: 8, batchWaitMs: 20 });
  });

  it("a failure lasting 30 s in one session holds that session only, then its steps go on in order", async function () {
    this.timeout(90_000);
    const accounts = Array.from({ length: 10 }, (_, i) => `fail-${i}`);
    const failingUntil = Date.now() + 30_000;
    const attempts: number[] = [];
    const handler = stepHandler((account, seq, context) => {
      if (account !== "fail-0" || seq !== 1) return undefined;
      attempts.push(context.attempt);
      return Date.now() < failingUntil ? new Error("ECONNREFUSED downstream") : undefined;
    });
    const sent = await sendSteps(fixture.client, FAILING, accounts, 4);
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: FAILING,
      handlers: [handler],
      sessions: { maxSessions: 4, idleMs: 300 },
      retryPolicy: {
        ...defaultRetryPolicy,
        transientDelaysMs: [1000, 2000, 4000, 8000, 16000, 16000],
        jitter: 0,
      },
    });
    workers.push(worker);
    // The other nine accounts are done while fail-0's step 1 still fails.
    await waitUntil(() => worker.stats.settled === sent - 3, "every other session's steps settled", 25_000);
    assert.ok(Date.now() < failingUntil, "the others finished while the failure lasted");
    const during = await outOfOrder(db, "fail-0");
    assert.equal(during.rows, 1, "fail-0 stopped at its step 1: its later steps waited behind it");
    await waitUntil(() => worker.stats.settled === sent, "fail-0's steps settled", 60_000);
    assert.deepEqual(await outOfOrder(db, "fail-"), { outOfOrder: 0, rows: sent, doubled: 0 });
    assert.ok(attempts.length >= 5, `retried in place (${attempts.join(",")})`);
    assert.equal(worker.stats.retriesScheduled, 0, "no scheduled copy: it would land behind the later steps");
    assert.equal(fixture.broker.counts(FAILING).deadLettered, 0, "no healthy message dead-lettered");
  });

  it("a killed worker's sessions go to another worker after the session lock expires, no effect doubled", async function () {
    const accounts = ["kill-0", "kill-1", "kill-2"];
    const sent = await sendSteps(fixture.client, KILLED, accounts, 3);
    const proxy = await StallProxy.start(fixture.broker.port);
    const doomedClient = new ServiceBusClient(localConnectionString(proxy.port), {
      retryOptions: { maxRetries: 0, timeoutInMs: 2_000 },
    });
    let killed = false;
    let committedBeforeKill = "";
    const doomed = startTestWorker({
      client: doomedClient,
      db,
      queue: KILLED,
      handlers: [stepHandler()],
      sessions: { maxSessions: 3, idleMs: 300 },
      // The first commit: the process "dies" between commit and complete (its connection drops, no detach).
      beforeSettle: async (message, decision) => {
        if (killed || decision.outcome !== "committed") return;
        killed = true;
        committedBeforeKill = message.messageId;
        await proxy.close();
        await new Promise(() => undefined);
      },
      gracePeriodMs: 200,
    });
    await waitUntil(() => killed, "the first worker committed once and died");
    const started = Date.now();
    const survivor = startTestWorker({
      client: fixture.client,
      db,
      queue: KILLED,
      handlers: [stepHandler()],
      sessions: { maxSessions: 3, idleMs: 300 },
    });
    workers.push(survivor);
    await waitUntil(() => survivor.stats.settled === sent, `the survivor settled all ${sent}`, 30_000);
    assert.ok(Date.now() - started >= 1000, "the dead worker's sessions waited for their locks to expire");
    // The dead worker's other sessions may have committed too (their settlements then failed on the dropped link).
    assert.ok(
      survivor.stats.duplicate >= 1,
      `${committedBeforeKill}, committed by the dead worker, came back as a duplicate (${survivor.stats.duplicate})`,
    );
    assert.deepEqual(await outOfOrder(db, "kill-"), { outOfOrder: 0, rows: sent, doubled: 0 });
    void doomed.stop();
    await doomedClient.close().catch(() => undefined);
  });

  it("session mode on an entity without sessions: receiving stops with an error naming the mismatch", async function () {
    const logs: string[] = [];
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: "plain",
      handlers: [stepHandler()],
      sessions: { maxSessions: 2 },
      logger: {
        debug: () => undefined,
        info: () => undefined,
        warn: () => undefined,
        error: (message: string, fields?: Record<string, unknown>) =>
          logs.push(`${message} ${String((fields?.["error"] as Error | undefined)?.message)}`),
      } as never,
    });
    workers.push(worker);
    await waitUntil(() => logs.length > 0, "the mismatch is logged");
    assert.match(logs[0]!, /'plain' is not session-enabled/);
    assert.equal((await worker.readiness()).receiver, "detached");
  });
});

describe("worker in session mode: poison, and the session id on the process span and in the logs", function () {
  const fixture = useLocalBroker(brokerConfig({ [ORDERED]: { RequiresSession: true } }));
  const telemetry = useTelemetryCapture();
  let db: Database;
  before(async () => {
    db = await exampleDatabase("worker_sessions_telemetry");
    await createStepsTable(db);
  });
  after(async () => {
    await db.close();
  });

  it("a poison message in a session is dead-lettered and the session goes on; each span and log line names the session", async function () {
    const sender = fixture.client.createSender(ORDERED);
    const step = (seq: number) => ({
      messageId: `tel-${seq}`,
      sessionId: "acct-tel",
      subject: "Step",
      body: Buffer.from(JSON.stringify({ account: "acct-tel", seq })),
    });
    await sender.sendMessages([
      step(0),
      { ...step(1), body: Buffer.from("{not json") },
      { ...step(2), body: Buffer.from(JSON.stringify({ account: "acct-tel", seq: 1 })) },
    ]);
    await sender.close();
    const lines: string[] = [];
    const worker = startTestWorker({
      client: fixture.client,
      db,
      queue: ORDERED,
      handlers: [stepHandler()],
      sessions: { maxSessions: 2, idleMs: 300 },
      logger: createLogger({ level: "debug", write: (line) => lines.push(line) }),
    });
    try {
      await waitUntil(() => worker.stats.settled === 3, "three settled");
    } finally {
      await worker.stop();
    }
    assert.equal(worker.stats.poison, 1);
    assert.equal(worker.stats.committed, 2, "the session went on past its poison message");
    const dead = await takeDeadLetters(fixture.client, ORDERED);
    assert.deepEqual(
      dead.map((m) => [m.messageId, m.sessionId, m.deadLetterReason]),
      [["tel-1", "acct-tel", "UndecodableBody"]],
    );
    const spans = telemetry()
      .spans()
      .filter((s) => s.name === `process ${ORDERED}`);
    assert.equal(spans.length, 3);
    assert.ok(spans.every((s) => s.attributes["sbinbox.session.id"] === "acct-tel"));
    const deadLine = lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l["msg"] === "message dead-lettered");
    assert.equal(
      deadLine?.["sessionId"],
      "acct-tel",
      `the dead-letter log line names the session: ${JSON.stringify(deadLine)}`,
    );
  });
});
