import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { freePort } from "../embedded/free-port.ts";
import { accountSql } from "../example/accounts.ts";
import { demoEvent } from "../example/demo-events.ts";
import { createServiceBusClient } from "../servicebus/client.ts";
import { deriveMessageId } from "../servicebus/message-id.ts";
import { createPublisher, type PublishEvent } from "../servicebus/publisher.ts";
import { sendRawMessages } from "../servicebus/raw.ts";
import { startUpstream } from "./demo-upstream.ts";
import { localWorkerEnv, startLocalStack } from "./local-stack.ts";
import { writesTelemetryToConsole } from "../telemetry/setup.ts";

export interface DemoOptions {
  readonly count: number;
  readonly timeoutMs: number;
  /** Progress and report lines. */
  readonly out: (line: string) => void;
  /** A live status line (rewritten in place on a terminal). */
  readonly status: (line: string) => void;
}

export interface DemoResult {
  readonly ok: boolean;
  readonly result: string;
}

const QUEUE = "sbinbox";
const CONSUMER = "sbinbox-demo";
const BIN = fileURLToPath(new URL("../../bin/sbinbox.js", import.meta.url));
const RESEND_EVERY = 20;
/** The upstream half: one in this many upstream transactions rolls back. */
const ROLLBACK_EVERY = 10;

export interface WorkerProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly port: number;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderrTail: string;
}

/**
 * The whole system on one machine: the local broker and an embedded PostgreSQL in this process, two worker
 * processes competing on one queue, N events published with trouble mixed in, and a report that holds or not.
 */
export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const { out, status } = options;
  const cleanups: (() => Promise<void>)[] = [];
  const workers: WorkerProcess[] = [];
  const killAll = (): void => {
    for (const w of workers)
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
  };
  process.once("exit", killAll);
  try {
    out("starting the local broker and an embedded PostgreSQL ...");
    const stack = await startLocalStack(
      {
        queue: { name: QUEUE, lockDurationMs: 3_000, maxDeliveryCount: 10 },
        database: "sbinbox_demo",
        maxConnections: 4,
      },
      cleanups,
    );
    const { broker, db, migrated } = stack;
    // Whose copies the broker dropped, by MessageId: the queue's count also takes the copies the upstream relay's
    // replacement sends again (rows its killed predecessor had sent and not yet marked), which are not resends of
    // the published events.
    const dropped = new Map<string, number>();
    broker.onDuplicateDropped(QUEUE, (id) => dropped.set(id, (dropped.get(id) ?? 0) + 1));
    out(`migrated: ${migrated.applied.join(", ") || "nothing pending"}; example tables ready`);

    const runId = randomUUID().slice(0, 8);
    const events: PublishEvent[] = Array.from({ length: options.count }, (_, i) => demoEvent(runId, i));
    const victim = events[Math.floor(options.count / 3)]!;
    const victimId = deriveMessageId(victim.type, victim.key);
    const flaky = Math.floor(options.count / 2);
    events[flaky] = { ...events[flaky]!, body: { ...(events[flaky]!.body as object), failOnce: true } };
    const expected = new Map(events.map((e) => [deriveMessageId(e.type, e.key), e]));

    const startWorker = async (name: string, extra: Record<string, string>): Promise<WorkerProcess> => {
      const worker = await spawnWorker(name, { ...localWorkerEnv(stack, CONSUMER), ...extra });
      workers.push(worker);
      return worker;
    };
    // Both carry the fault switch: whichever commits the victim dies before completing it.
    const fault = { SBINBOX_FAULT_KILL_AFTER_COMMIT: victimId };
    await Promise.all([startWorker("worker-1", fault), startWorker("worker-2", fault)]);
    out(`two worker processes started (pids ${workers.map((w) => w.child.pid).join(", ")})`);

    // The upstream half: its own database, transfers and outbox rows in one transaction, a relay process that is
    // killed (SIGKILL) half-way and replaced.
    const upstream = await startUpstream(stack, {
      runId,
      rollbackEvery: ROLLBACK_EVERY,
      env: withoutSbinboxSettings(process.env),
    });
    cleanups.push(() => upstream.close());
    const upstreamCount = Math.max(20, Math.floor(options.count / 4));
    await upstream.startRelay();
    const upstreamRun = (async () => {
      await upstream.run(Math.floor(upstreamCount / 2));
      upstream.relays[0]!.kill("SIGKILL");
      await upstream.startRelay();
      await upstream.run(upstreamCount - Math.floor(upstreamCount / 2));
    })();

    const client = createServiceBusClient({ connectionString: broker.connectionString });
    cleanups.push(() => client.close());
    const publisher = createPublisher({ client, queue: QUEUE });
    cleanups.push(() => publisher.close());
    let resends = 0;
    const resent: string[] = [];
    for (let i = 0; i < events.length; i += 100) {
      const batch = events.slice(i, i + 100);
      await publisher.publishBatch(batch);
      // A lost acknowledgement: the publisher cannot tell the send succeeded, so it sends again.
      const again = batch.filter((_, j) => (i + j) % RESEND_EVERY === 0);
      if (again.length > 0) await publisher.publishBatch(again);
      resends += again.length;
      for (const e of again) resent.push(deriveMessageId(e.type, e.key));
      status(`published ${Math.min(i + 100, events.length)}/${events.length} (+${resends} resends)`);
    }
    const poison = [
      {
        messageId: `poison-json-${runId}`,
        subject: "AccountCredited",
        contentType: "application/json",
        body: Buffer.from("{not json"),
      },
      {
        messageId: `poison-type-${runId}`,
        subject: "AccountDebited",
        body: Buffer.from('{"accountId":"acc-1","amount":1}'),
      },
      {
        messageId: `poison-schema-${runId}`,
        subject: "AccountCredited",
        body: Buffer.from('{"accountId":"acc-1","amount":-5}'),
      },
    ];
    await sendRawMessages(client, QUEUE, poison);
    out(`published ${events.length} events, ${resends} resends of them, ${poison.length} poison messages`);
    await upstreamRun;
    const upstreamOutcome = await upstream.outcome();
    for (const e of upstreamOutcome.committed) expected.set(deriveMessageId(e.type, e.key), e);
    out(
      `upstream: ${upstreamOutcome.committed.length} transactions committed and ${upstreamOutcome.rolledBack} rolled back, ` +
        `each with its event in the outbox; the relay was killed once and replaced`,
    );

    // Watch until every event is applied and the queue is empty; replace a killed worker as an orchestrator would.
    let killed = 0;
    const deadline = Date.now() + options.timeoutMs;
    let applied = 0;
    for (;;) {
      for (const w of [...workers]) {
        if (w.child.signalCode === "SIGKILL" && !("replaced" in w)) {
          Object.assign(w, { replaced: true });
          killed += 1;
          out(
            `${w.name} (pid ${w.child.pid}) was killed between commit and complete; starting a replacement`,
          );
          await startWorker(`${w.name}-restarted`, {});
        } else if (w.child.exitCode !== null && !("replaced" in w)) {
          throw new Error(`${w.name} exited with code ${w.child.exitCode}: ${w.stderrTail}`);
        }
      }
      applied = await scalar(db.sql, "SELECT count(DISTINCT message_id)::int AS n FROM example_credits");
      const c = broker.counts(QUEUE);
      status(
        `applied ${applied}/${events.length} | queue: ${c.active} waiting, ${c.locked} locked | ` +
          `dead-lettered ${c.deadLettered} | dropped resends ${c.duplicatesDropped} | killed ${killed}`,
      );
      const unsent = await upstream.unsent();
      if (
        applied >= expected.size &&
        unsent === 0 &&
        c.active + c.locked === 0 &&
        c.deadLettered >= poison.length
      )
        break;
      if (Date.now() > deadline) {
        out(`timed out after ${options.timeoutMs} ms`);
        break;
      }
      await new Promise((r) => setTimeout(r, 200));
    }

    // The counters come from each worker's last log line ("stopped", with its stats): /readyz is public and
    // carries none.
    let duplicates = 0;
    let transientFailures = 0;
    await Promise.all(
      workers
        .filter((w) => w.child.exitCode === null && w.child.signalCode === null)
        .map(async (w) => {
          w.child.kill("SIGTERM");
          const { code } = await w.exited;
          if (code !== 0) out(`${w.name} exited with code ${code} after SIGTERM`);
          const stats = statsFromLog(w.stderrTail);
          duplicates += stats.duplicate;
          transientFailures += stats.failed;
        }),
    );

    const { rows } = await db.sql.query<{ messageId: string; n: number }>(
      accountSql.creditsPerMessage.postgres,
    );
    const perMessage = new Map(rows.map((r) => [r.messageId, Number(r.n)]));
    const effects = [...perMessage.values()].reduce((a, b) => a + b, 0);
    const lost = [...expected.keys()].filter((id) => !perMessage.has(id)).length;
    const doubled = [...perMessage.values()].filter((n) => n > 1).length;
    const unexpected = [...perMessage.keys()].filter((id) => !expected.has(id)).length;
    const balances = await balancesMatch(db.sql, [...events, ...upstreamOutcome.committed]);
    const upstreamIds = upstreamOutcome.committed.map((e) => deriveMessageId(e.type, e.key));
    const upstreamEffects = upstreamIds.reduce((sum, id) => sum + (perMessage.get(id) ?? 0), 0);
    const rolledBackApplied = upstreamOutcome.notCommitted.filter((e) =>
      perMessage.has(deriveMessageId(e.type, e.key)),
    ).length;
    const transfers = upstreamOutcome.committed.length;
    // The RESULT line's `effects` stays what it was: the effects of the published events; upstream ones follow.
    const publishedEffects = events.reduce(
      (sum, e) => sum + (perMessage.get(deriveMessageId(e.type, e.key)) ?? 0),
      0,
    );
    const counts = broker.counts(QUEUE);
    const deadLettered = counts.deadLettered;
    // Every resend must be dropped; one dropped twice (the publisher's own resend of it) counts twice.
    const resendsDropped = resent.reduce((sum, id) => sum + (dropped.get(id) ?? 0), 0);
    const upstreamIdSet = new Set(upstreamIds);
    let upstreamDropped = 0;
    for (const [id, n] of dropped) if (upstreamIdSet.has(id)) upstreamDropped += n;

    out("");
    out("report");
    out(`  events published          ${events.length} distinct, ${resends} resent, ${poison.length} poison`);
    out(`  resends dropped by broker ${resendsDropped} (duplicate detection on the derived MessageId)`);
    out(
      `  relay copies dropped      ${upstreamDropped} (resent by the replacement relay; ` +
        `${counts.duplicatesDropped} dropped on the queue in all)`,
    );
    out(`  worker killed after commit ${killed} (its message redelivered and absorbed by the inbox)`);
    out(
      `  duplicates in the inbox   ${duplicates} (redeliveries found already done, completed without effect)`,
    );
    out(`  transient failures        ${transientFailures} (abandoned, redelivered, then applied)`);
    out(`  dead-lettered             ${deadLettered} (poison, at once, with a reason)`);
    out(
      `  effects                   ${effects} credit rows; lost ${lost}, doubled ${doubled}, unexpected ${unexpected}`,
    );
    out(
      `  upstream                  ${transfers} transfers committed, ${upstreamOutcome.rolledBack} rolled back; ` +
        `${upstreamEffects} downstream effects for them, ${rolledBackApplied} for rolled-back ones`,
    );
    out(`  account balances          ${balances ? "match the events" : "DO NOT match the events"}`);
    const ok =
      lost === 0 &&
      doubled === 0 &&
      unexpected === 0 &&
      effects === expected.size &&
      upstreamOutcome.notCommitted.length === upstreamOutcome.rolledBack &&
      upstreamEffects === transfers &&
      rolledBackApplied === 0 &&
      deadLettered === poison.length &&
      resendsDropped === resends &&
      resent.every((id) => dropped.has(id)) &&
      killed >= 1 &&
      balances;
    out(ok ? "  verdict                   exactly once: it holds" : "  verdict                   FAILED");
    const result =
      `RESULT distinct=${events.length} effects=${publishedEffects} resends=${resends} ` +
      `dropped_by_broker=${resendsDropped} duplicates_in_inbox=${duplicates} poison=${poison.length} ` +
      `deadlettered=${deadLettered} lost=${lost} doubled=${doubled} ` +
      `upstream=${transfers} upstream_effects=${upstreamEffects} upstream_rolled_back=${upstreamOutcome.rolledBack} ` +
      `rolled_back_effects=${rolledBackApplied} upstream_dropped_by_broker=${upstreamDropped}`;
    return { ok, result };
  } finally {
    killAll();
    process.removeListener("exit", killAll);
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup();
      } catch {
        // Best effort: the demo's result is already decided.
      }
    }
  }
}

/** A `sbinbox worker` process on a free port with these settings, its stderr's tail kept for its counters. */
export async function spawnWorker(name: string, settings: Record<string, string>): Promise<WorkerProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, "worker"], {
    env: {
      ...withoutSbinboxSettings(process.env),
      ...settings,
      // Info, for the final "stopped" line that carries the counters the report shows.
      SBINBOX_LOG_LEVEL: "info",
      PORT: String(port),
    },
    // With OTEL_TRACES_EXPORTER=console the workers' spans are the point: pass their stdout through.
    stdio: ["ignore", writesTelemetryToConsole() ? "inherit" : "ignore", "pipe"],
  });
  const worker: WorkerProcess = {
    name,
    child,
    port,
    stderrTail: "",
    exited: new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal }))),
  };
  child.stderr
    .setEncoding("utf8")
    .on("data", (d: string) => (worker.stderrTail = (worker.stderrTail + d).slice(-4000)));
  return worker;
}

export function withoutSbinboxSettings(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith("SBINBOX_") && k !== "PORT"));
}

async function scalar(
  sql: { query<R>(text: string): Promise<{ rows: R[] }> },
  text: string,
): Promise<number> {
  const { rows } = await sql.query<{ n: number }>(text);
  return Number(rows[0]?.n ?? 0);
}

/** The worker's counters from its final "stopped" log line; zeros when it has none (it was killed). */
export function statsFromLog(stderr: string): {
  duplicate: number;
  failed: number;
  retriesScheduled: number;
} {
  const line = stderr
    .split("\n")
    .reverse()
    .find((l) => l.includes('"msg":"stopped"'));
  try {
    const record = JSON.parse(line ?? "{}") as {
      duplicate?: number;
      failed?: number;
      retriesScheduled?: number;
    };
    return {
      duplicate: record.duplicate ?? 0,
      failed: record.failed ?? 0,
      retriesScheduled: record.retriesScheduled ?? 0,
    };
  } catch {
    return { duplicate: 0, failed: 0, retriesScheduled: 0 };
  }
}

/** Each account's balance is the sum of the amounts of the events credited to it, no more and no less. */
export async function balancesMatch(
  sql: { query<R>(text: string): Promise<{ rows: R[] }> },
  events: readonly PublishEvent[],
): Promise<boolean> {
  const want = new Map<string, number>();
  for (const e of events) {
    const body = e.body as { accountId: string; amount: number };
    want.set(body.accountId, (want.get(body.accountId) ?? 0) + body.amount);
  }
  const { rows } = await sql.query<{ account_id: string; balance: string }>(
    "SELECT account_id, balance FROM example_accounts",
  );
  if (rows.length !== want.size) return false;
  return rows.every((r) => want.get(r.account_id) === Number(r.balance));
}
