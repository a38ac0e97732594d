// One message through the worker's own per-message code, for bench/telemetry-cost.ts: the calls receiver.ts
// (processOne, decideAndSettle, settle) and worker.ts (receiverHooks) make, in their order, around processMessage
// on the real traced inbox. Only the pg pool is a stand-in: it answers every statement at once, in memory, so
// what is measured is the worker's code and the telemetry's, not a database.
import { context } from "@opentelemetry/api";
import type pg from "pg";
import { HandlerRegistry, type IncomingMessage } from "../src/domain/envelope.ts";
import { exampleHandlers } from "../src/example/index.ts";
import { InboxCore } from "../src/inbox/core.ts";
import { PostgresDriver } from "../src/inbox/postgres/adapter.ts";
import { endProcessSpan, startProcessSpan, traceSettlement } from "../src/servicebus/tracing.ts";
import { traceInboxDriver, traceInboxStore } from "../src/telemetry/inbox-tracing.ts";
import { workerMetrics } from "../src/telemetry/metrics.ts";
import { processMessage, type ProcessMessageDeps } from "../src/worker/process-message.ts";

const answer = (sql: string): pg.QueryResult =>
  ({
    rows: [],
    rowCount: 1,
    command: sql.trimStart().slice(0, 6).toUpperCase() === "COMMIT" ? "COMMIT" : "INSERT",
    oid: 0,
    fields: [],
  }) as pg.QueryResult;

/** A pg.Pool as far as PostgresDriver uses one: query, connect (a pipelining client), on, options. */
function memoryPool(): pg.Pool {
  const client = {
    pipeline: true,
    query: (sql: string | { text: string }) =>
      Promise.resolve(answer(typeof sql === "string" ? sql : sql.text)),
    on: () => client,
    removeListener: () => client,
    release: () => undefined,
  };
  const pool = {
    options: { pipeline: true },
    query: (sql: string) => Promise.resolve(answer(sql)),
    connect: () => Promise.resolve(client),
    on: () => pool,
  };
  return pool as unknown as pg.Pool;
}

/** Returns a function that takes message number `i` through receipt, processing, settlement and its records. */
export async function oneMessage(queue: string): Promise<(i: number) => Promise<void>> {
  const store = traceInboxStore(new InboxCore(traceInboxDriver(new PostgresDriver({ pool: memoryPool() }))));
  const deps: ProcessMessageDeps = {
    store,
    registry: new HandlerRegistry(exampleHandlers()),
    consumer: "bench",
    maxMessageBytes: 256 * 1024,
  };
  const metrics = workerMetrics();
  const body = Buffer.from(JSON.stringify({ accountId: "a1", amount: 5 }));
  const settle = () => Promise.resolve();
  // Checked once: a run whose messages fail would measure the failure path, not the happy one.
  const check = await processMessage(message(0, body), deps);
  if (check.outcome !== "committed")
    throw new Error(`telemetry-cost: message not committed: ${check.outcome}`);
  return async (i) => {
    const began = performance.now();
    metrics.recordConsumed(queue);
    const incoming = message(i + 1, body);
    const { span, ctx } = startProcessSpan({
      queue,
      messageId: incoming.messageId,
      correlationId: incoming.correlationId,
      deliveryCount: incoming.deliveryCount,
      sessionId: incoming.sessionId,
      applicationProperties: incoming.applicationProperties,
    });
    const decision = await context.with(ctx, () => processMessage(incoming, deps));
    await context.with(ctx, () => traceSettlement("complete", queue, ctx, settle));
    const durationMs = performance.now() - began;
    metrics.recordSettlement({ queue, disposition: "complete" });
    metrics.recordProcessed({ queue, outcome: decision.outcome, durationMs });
    endProcessSpan(span, {
      outcome: decision.outcome,
      disposition: "complete",
      messageType: decision.messageType,
    });
  };
}

function message(i: number, body: Buffer): IncomingMessage {
  return {
    messageId: `m-${i}`,
    body,
    subject: "AccountCredited",
    contentType: "application/json",
    deliveryCount: 0,
    enqueuedTime: new Date(),
    applicationProperties: {},
  };
}
