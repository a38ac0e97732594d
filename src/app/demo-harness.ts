import { randomUUID } from "node:crypto";
import type { LocalBroker } from "sbinbox-dev";
import { createServiceBusClient } from "../servicebus/client.ts";
import { deriveMessageId } from "../servicebus/message-id.ts";
import { createPublisher, type PublishEvent } from "../servicebus/publisher.ts";
import { sendRawMessages, type RawMessage } from "../servicebus/raw.ts";
import { appliedCount, type Queryable } from "./demo-checks.ts";
import { spawnWorker, statsFromLog, type WorkerProcess, type WorkerStats } from "./demo-workers.ts";
import { OWN_RETRY } from "../servicebus/throttling.ts";

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

/** Every 20th event is sent twice: a lost acknowledgement, the publisher cannot tell the send succeeded. */
const RESEND_EVERY = 20;
const BATCH = 100;

/** One consuming service: its workers, the entity they receive from, and its database. */
export interface DemoConsumer {
  /** SBINBOX_CONSUMER, and how its workers and its stats are named. */
  readonly name: string;
  /** The entity its workers receive from, where the broker's counts are read. */
  readonly queue: string;
  /** This process's pool on the consumer's database. */
  readonly sql: Queryable;
  readonly workers: number;
  /** The workers' settings: broker, database, queue and whatever the variant adds. */
  readonly env: Record<string, string>;
  /** Its first workers carry the kill-between-commit-and-complete switch for one event. */
  readonly faulty: boolean;
}

/** What a variant (queue, topic, sessions) set up, and how it reads the outcome. */
export interface DemoStage {
  readonly broker: LocalBroker;
  /** The queue or topic the events are published to. */
  readonly target: string;
  readonly consumers: readonly DemoConsumer[];
  /** The n-th published event; the harness marks one of them to fail once and one to kill its worker. */
  event(runId: string, index: number): PublishEvent;
  /** The poison messages as sent (the variant may give them session ids); by default `poisonMessages`. */
  poison?(messages: RawMessage[]): RawMessage[];
  /** Work beside the publishing (the queue demo's upstream half), started once the workers are. */
  readonly alongside?: Alongside;
  /** The report lines and the RESULT line, once every worker has stopped. */
  report(run: DemoRun): Promise<DemoResult>;
}

export interface Alongside {
  start(runId: string): Promise<void>;
  /** After the publishing: waits for the work to end; its events join the expected ones. */
  finish(): Promise<readonly PublishEvent[]>;
  /** Whether nothing of it is still on its way (the watch ends only then). */
  settled(): Promise<boolean>;
}

export interface DemoRun {
  readonly events: readonly PublishEvent[];
  /** MessageIds of the events sent a second time, once each time. */
  readonly resent: readonly string[];
  readonly poison: readonly RawMessage[];
  /** MessageIds each consumer must have applied exactly once: the published events and the alongside ones. */
  readonly expected: ReadonlySet<string>;
  /** Workers killed between commit and complete (and replaced). */
  readonly killed: number;
  /** By consumer: the counters of its workers that stopped with SIGTERM. */
  readonly stats: ReadonlyMap<string, WorkerStats>;
}

/**
 * The demo's run, whatever the variant: N events published with resends, poison and a transient failure mixed in,
 * the consumers' workers with one killed between commit and complete and replaced as an orchestrator would, a watch
 * until every consumer has applied everything and its queue is empty, then the variant's report. `setUp` starts the
 * broker and the databases, each cleanup pushed as soon as its piece exists.
 */
export async function runDemoHarness(
  options: DemoOptions,
  setUp: (cleanups: (() => Promise<void>)[]) => Promise<DemoStage>,
): Promise<DemoResult> {
  const { out, status } = options;
  const cleanups: (() => Promise<void>)[] = [];
  const workers: (WorkerProcess & { consumer: DemoConsumer; replaced?: boolean })[] = [];
  const killAll = (): void => {
    for (const w of workers)
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
  };
  process.once("exit", killAll);
  try {
    const stage = await setUp(cleanups);
    const { broker, target, consumers } = stage;
    const runId = randomUUID().slice(0, 8);
    const events = Array.from({ length: options.count }, (_, i) => stage.event(runId, i));
    const victim = events[Math.floor(options.count / 3)]!;
    const victimId = deriveMessageId(victim.type, victim.key);
    const flaky = Math.floor(options.count / 2);
    events[flaky] = { ...events[flaky]!, body: { ...(events[flaky]!.body as object), failOnce: true } };
    const expected = new Set(events.map((e) => deriveMessageId(e.type, e.key)));

    const start = async (consumer: DemoConsumer, name: string, fault: boolean): Promise<void> => {
      const settings = fault ? { ...consumer.env, SBINBOX_FAULT_KILL_AFTER_COMMIT: victimId } : consumer.env;
      workers.push(Object.assign(await spawnWorker(name, settings), { consumer }));
    };
    // Whichever of the faulty consumer's workers commits the victim dies before completing it.
    for (const consumer of consumers)
      for (let n = 1; n <= consumer.workers; n++)
        await start(consumer, `${consumer.name}-${n}`, consumer.faulty);
    out(
      `${workers.length} worker processes started: ` +
        workers.map((w) => `${w.name} (pid ${w.child.pid})`).join(", "),
    );
    await stage.alongside?.start(runId);

    const client = createServiceBusClient(
      { connectionString: broker.connectionString },
      // The worker and the publisher retry ServerBusy themselves (src/servicebus/throttling.ts).
      { retryOptions: OWN_RETRY },
    );
    cleanups.push(() => client.close());
    const publisher = createPublisher({ client, queue: target });
    cleanups.push(() => publisher.close());
    const resent: string[] = [];
    for (let i = 0; i < events.length; i += BATCH) {
      const batch = events.slice(i, i + BATCH);
      await publisher.publishBatch(batch);
      const again = batch.filter((_, j) => (i + j) % RESEND_EVERY === 0);
      if (again.length > 0) await publisher.publishBatch(again);
      for (const e of again) resent.push(deriveMessageId(e.type, e.key));
      status(
        `published ${Math.min(i + BATCH, events.length)}/${events.length} to ${target} (+${resent.length} resends)`,
      );
    }
    const poison = stage.poison ? stage.poison(poisonMessages(runId)) : poisonMessages(runId);
    await sendRawMessages(client, target, poison);
    out(
      `published ${events.length} events to ${target}, ${resent.length} resends of them, ${poison.length} poison messages`,
    );
    for (const e of (await stage.alongside?.finish()) ?? []) expected.add(deriveMessageId(e.type, e.key));

    let killed = 0;
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      for (const w of [...workers]) {
        if (w.child.signalCode === "SIGKILL" && !w.replaced) {
          w.replaced = true;
          killed += 1;
          out(
            `${w.name} (pid ${w.child.pid}) was killed between commit and complete; starting a replacement`,
          );
          await start(w.consumer, `${w.name}-restarted`, false);
        } else if (w.child.exitCode !== null && !w.replaced) {
          throw new Error(`${w.name} exited with code ${w.child.exitCode}: ${w.stderrTail}`);
        }
      }
      let done = (await stage.alongside?.settled()) ?? true;
      const parts: string[] = [];
      for (const consumer of consumers) {
        const applied = await appliedCount(consumer.sql);
        const c = broker.counts(consumer.queue);
        parts.push(
          `${consumer.name} ${applied}/${expected.size} (${c.active} waiting, ${c.locked} locked, ${c.deadLettered} dead-lettered)`,
        );
        if (applied < expected.size || c.active + c.locked > 0 || c.deadLettered < poison.length)
          done = false;
      }
      status(`applied: ${parts.join(" | ")} | killed ${killed}`);
      if (done) break;
      if (Date.now() > deadline) {
        out(`timed out after ${options.timeoutMs} ms`);
        break;
      }
      await new Promise((r) => setTimeout(r, 200));
    }

    // The counters come from each worker's last log line ("stopped", with its stats): /readyz is public and
    // carries none.
    const stats = new Map<string, WorkerStats>(
      consumers.map((c) => [c.name, { duplicate: 0, failed: 0, retriesScheduled: 0, retriesWaited: 0 }]),
    );
    await Promise.all(
      workers
        .filter((w) => w.child.exitCode === null && w.child.signalCode === null)
        .map(async (w) => {
          w.child.kill("SIGTERM");
          const { code } = await w.exited;
          if (code !== 0) out(`${w.name} exited with code ${code} after SIGTERM`);
          const mine = statsFromLog(w.stderrTail);
          const sum = stats.get(w.consumer.name)!;
          stats.set(w.consumer.name, {
            duplicate: sum.duplicate + mine.duplicate,
            failed: sum.failed + mine.failed,
            retriesScheduled: sum.retriesScheduled + mine.retriesScheduled,
            retriesWaited: sum.retriesWaited + mine.retriesWaited,
          });
        }),
    );
    out("");
    out("report");
    return await stage.report({ events, resent, poison, expected, killed, stats });
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

/** Three messages no handler can take: a body that is not JSON, a type nobody handles, a body against its schema. */
export function poisonMessages(runId: string): RawMessage[] {
  return [
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
}
