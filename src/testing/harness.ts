import { rmSync, readFileSync } from "node:fs";
import {
  CopyProperty,
  createPublisher,
  createServiceBusClient,
  createWorker,
  defaultRetryPolicy,
  loadHandlerModule,
  migrate,
  openDatabase,
  OWN_RETRY,
  replayDeadLetters,
  silentLogger,
  type Database,
  type HandlerModule,
  type Logger,
  type MessageHandler,
  type ReplayResult,
  type RetryPolicy,
  type SqlExecutor,
  type Worker,
} from "sbinbox";
import {
  EmbeddedPostgresServer,
  LocalBroker,
  defaultConfig,
  queueDefaults,
  type QueueSettings,
} from "sbinbox-dev";
import { errorText, OutcomeTracker, type Outcome } from "./outcomes.ts";

export interface HarnessOptions {
  /**
   * The team's handler module: the module itself, or its path or package name as SBINBOX_HANDLERS takes it (a
   * relative path from the working directory, "./handlers/index.ts"). Its migrations are applied after the inbox's.
   */
  readonly module?: HandlerModule | string;
  /** Handlers to run instead of the module's (their tables already migrated, or in the module given too). */
  readonly handlers?: readonly MessageHandler[];
  /**
   * The team's own PostgreSQL: a URL to a database this harness may migrate and write (give each test file its
   * own). Default: an embedded PostgreSQL of this harness's own, removed by `stop`.
   */
  readonly postgresUrl?: string;
  /**
   * The queue as the local broker serves it, over the broker's defaults: a short `lockDurationMs`, a small
   * `maxDeliveryCount`, a `duplicateDetectionWindowMs`.
   */
  readonly queue?: Partial<Omit<QueueSettings, "name">>;
  /** The retry policy over the harness's fast one (100, 200 ms in place, then a 500 ms scheduled copy; jitter off). */
  readonly retry?: Partial<RetryPolicy>;
  readonly maxConcurrentCalls?: number;
  /**
   * Messages per inbox transaction (group commit, docs/batching.md), at most `maxConcurrentCalls`; default "auto",
   * as the worker's: handlers that declare keys run in batches of half of `maxConcurrentCalls`, the others alone.
   * A number makes every message batch (with a 20 ms wait, so that a test's few messages meet in one); 1, none.
   */
  readonly batchSize?: number | "auto";
  /** How long `outcome` waits by default; 15 s. */
  readonly outcomeTimeoutMs?: number;
  /** The worker's log, silent by default. */
  readonly logger?: Logger;
}

/** A message exactly as given: a malformed body, a missing type, a resend of a MessageId already used. */
export interface RawMessage {
  readonly messageId: string;
  /** A Buffer is sent as it is; anything else as JSON. */
  readonly body: unknown;
  /** The message type (the handler's `type`). */
  readonly subject?: string;
  readonly contentType?: string;
  readonly correlationId?: string;
  readonly applicationProperties?: Record<string, string | number | boolean>;
}

export interface Harness {
  /** The local broker's connection string (a publisher of the test's own can use it). */
  readonly connectionString: string;
  readonly queue: string;
  /** The database's URL. */
  readonly postgresUrl: string;
  /** Statements on the database, outside any message's transaction: read the handlers' effects with it. */
  readonly db: SqlExecutor;
  readonly broker: LocalBroker;
  readonly worker: Worker;
  /** Publishes as an upstream service does (MessageId derived from type and key); returns the MessageId. */
  publish(type: string, key: string, body: unknown): Promise<string>;
  /**
   * Sends `message` as given. With `pastDuplicateWindow`, the broker's clock runs past its duplicate-detection
   * window for this send only, so a resend of a MessageId already used reaches the worker, and the window of every
   * MessageId sent before is over. Send it while nothing else is in flight: locks and schedules read that clock.
   */
  sendRaw(message: RawMessage, options?: { readonly pastDuplicateWindow?: boolean }): Promise<string>;
  /**
   * What became of the message with this MessageId: the next outcome not awaited yet, so awaiting the same id
   * twice gives the original's outcome, then its resend's. Rejects after `timeoutMs` naming what was seen.
   */
  outcome(messageId: string, options?: { readonly timeoutMs?: number }): Promise<Outcome>;
  /**
   * Replays the dead-lettered message with this MessageId (or inbox key: its retry and replay copies too) as
   * `sbinbox dlq replay --id` does: a copy with the next replay number, carrying the original inbox key, sent to
   * the queue before the dead-lettered one is removed. Await `outcome(messageId)` for what became of the copy.
   * Returns each replayed message with its copy's MessageId; throws when none is dead-lettered under that id.
   */
  replay(messageId: string): Promise<ReplayResult["replayed"]>;
  /**
   * Stops the worker, then calls the module's `stop` (its own pools closed while the database still answers), then
   * the broker and the embedded PostgreSQL (its data removed). Safe to call twice.
   */
  stop(): Promise<void>;
}

/** Quick enough that a test sees every branch in about a second: two waits in place, then a scheduled copy. */
export const HARNESS_RETRY_POLICY: RetryPolicy = {
  ...defaultRetryPolicy,
  transientDelaysMs: [100, 200, 500],
  permanentDelaysMs: [100],
  migrationDelaysMs: [100, 200],
  jitter: 0,
  maxInProcessWaitMs: 250,
  lockMarginMs: 1_000,
};

const QUEUE = "sbinbox";
const CONSUMER = "harness";

/**
 * Starts what a team's handlers run on, in this process: the local broker on a free port, an embedded PostgreSQL
 * (or the team's by URL), the inbox's and the module's migrations (`migrate`, as `sbinbox migrate` runs it), and
 * the worker with the module's handlers. Each harness has its own broker and database, so test files run side by
 * side. Call `stop` in an after hook; a process that exits without it, or is ended by SIGTERM, SIGINT or SIGHUP,
 * still stops the PostgreSQL it started and removes its folder.
 */
export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const cleanups: Cleanup[] = [];
  const stopAll = async (): Promise<void> => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      try {
        await cleanup();
      } catch {
        // Each part is stopped whatever the others did.
      }
    }
  };
  try {
    const module =
      typeof options.module === "string" ? await loadHandlerModule(options.module) : options.module;
    const handlers = options.handlers ?? (module ? await module.handlers() : undefined);
    if (!handlers || handlers.length === 0)
      throw new TypeError("startHarness needs a module with handlers, or handlers");
    const url = options.postgresUrl ?? (await startPostgres(cleanups));
    await migrate({ database: { kind: "postgres", url }, module });
    const tracker = new OutcomeTracker();
    const { broker, settings, skew } = await startBroker(options, tracker, cleanups);

    const database: Database = await openDatabase(
      { kind: "postgres", url },
      { preCheck: "redeliveries", maxConnections: (options.maxConcurrentCalls ?? 8) + 4 },
    );
    cleanups.push(() => database.close());
    const client = createServiceBusClient(
      { connectionString: broker.connectionString },
      // The worker and the publisher retry ServerBusy themselves (src/servicebus/throttling.ts).
      { retryOptions: OWN_RETRY },
    );
    cleanups.push(() => client.close());
    const publisher = createPublisher({ queue: QUEUE, client });
    cleanups.push(() => publisher.close());
    // Stopped after the worker (cleanups run in reverse), before the database and PostgreSQL: a pool of the
    // module's own then ends while its server still answers, instead of meeting its shutdown.
    if (module?.stop) cleanups.push(() => module.stop!());
    const worker = startHarnessWorker(options, { client, database, handlers, tracker });
    cleanups.push(() => worker.stop());

    const sender = client.createSender(QUEUE);
    cleanups.push(() => sender.close());
    const timeoutMs = options.outcomeTimeoutMs ?? 15_000;
    let stopped: Promise<void> | undefined;
    return {
      connectionString: broker.connectionString,
      queue: QUEUE,
      postgresUrl: url,
      db: database.sql,
      broker,
      worker,
      async publish(type, key, body) {
        return (await publisher.publish(type, key, body)).messageId;
      },
      async sendRaw(message, sendOptions) {
        const { body, ...rest } = message;
        if (sendOptions?.pastDuplicateWindow) skew.ms = settings.duplicateDetectionWindowMs + 1_000;
        try {
          await sender.sendMessages({
            ...rest,
            body: Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body)),
          });
        } finally {
          skew.ms = 0;
        }
        return message.messageId;
      },
      outcome: (messageId, outcomeOptions) => tracker.next(messageId, outcomeOptions?.timeoutMs ?? timeoutMs),
      replay: (messageId) => replayOne(client, messageId),
      stop() {
        stopped ??= stopAll();
        return stopped;
      },
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}

type Cleanup = () => Promise<void> | void;
type ServiceBusClient = ReturnType<typeof createServiceBusClient>;

/** An embedded PostgreSQL of the harness's own, also stopped (and its folder removed) at exit or on a signal. */
async function startPostgres(cleanups: Cleanup[]): Promise<string> {
  const server = await EmbeddedPostgresServer.create();
  const killOnExit = stopOnExit(server);
  process.once("exit", killOnExit);
  const unhookSignals = stopOnSignals(killOnExit);
  cleanups.push(async () => {
    process.off("exit", killOnExit);
    unhookSignals();
    await server.dispose();
  });
  return server.url();
}

/** The local broker with the harness's queue, its duplicate drops and dead-letters told to the tracker. */
async function startBroker(
  options: HarnessOptions,
  tracker: OutcomeTracker,
  cleanups: Cleanup[],
): Promise<{ broker: LocalBroker; settings: QueueSettings; skew: { ms: number } }> {
  const settings: QueueSettings = { ...queueDefaults, ...options.queue, name: QUEUE };
  const config = defaultConfig();
  config.queues = [settings];
  // The broker's clock runs ahead while a test resends past the duplicate-detection window.
  const skew = { ms: 0 };
  const broker = await LocalBroker.start({ port: 0, config, now: () => Date.now() + skew.ms });
  cleanups.push(() => broker.stop());
  cleanups.push(() => tracker.close());
  cleanups.push(broker.onDuplicateDropped(QUEUE, (id) => tracker.dropped(id)));
  cleanups.push(
    broker.onDeadLettered(QUEUE, (id, reason, description) =>
      tracker.deadLetteredByBroker(id, reason, description),
    ),
  );
  return { broker, settings, skew };
}

/** The worker as the harness runs it (short back-offs, the fast retry policy), its decisions told to the tracker. */
function startHarnessWorker(
  options: HarnessOptions,
  parts: {
    client: ServiceBusClient;
    database: Database;
    handlers: readonly MessageHandler[];
    tracker: OutcomeTracker;
  },
): Worker {
  const { client, database, handlers, tracker } = parts;
  const worker = createWorker({
    client,
    store: database.store,
    handlers,
    queue: QUEUE,
    consumer: CONSUMER,
    maxConcurrentCalls: options.maxConcurrentCalls ?? 8,
    batchSize: options.batchSize,
    batchWaitMs: typeof options.batchSize === "number" ? 20 : undefined,
    gracePeriodMs: 2_000,
    sweepIntervalMs: 0,
    outageBackoffMinMs: 50,
    outageBackoffMaxMs: 500,
    retryPolicy: { ...HARNESS_RETRY_POLICY, ...options.retry },
    logger: options.logger ?? silentLogger,
    onRetry: (message, retry) =>
      tracker.waited(message.messageId, {
        attempt: retry.attempt,
        how: "waited",
        delayMs: retry.delayMs,
        errorClass: retry.errorClass,
        error: errorText(retry.error),
      }),
    beforeSettle: (message, decision) => {
      const original = message.applicationProperties[CopyProperty.originalKey];
      const key = typeof original === "string" ? original : message.messageId;
      tracker.settled(key, message.messageId, decision);
    },
  });
  worker.start();
  return worker;
}

/** `sbinbox dlq replay --id`: the dead-lettered message by MessageId or inbox key. */
async function replayOne(client: ServiceBusClient, messageId: string): Promise<ReplayResult["replayed"]> {
  const { replayed } = await replayDeadLetters(
    client,
    QUEUE,
    (m) => m.messageId === messageId || m.inboxKey === messageId,
  );
  if (replayed.length === 0)
    throw new Error(`harness.replay: no dead-lettered message has MessageId or inbox key ${messageId}`);
  return replayed;
}

/**
 * At exit, without waiting: the PostgreSQL server's postmaster asked to quit at once (it takes its backends with
 * it) and its data removed, for a test run that ends without calling `stop` (a failed before hook, a forgotten
 * after hook). Only what `stop` has not already done.
 */
function stopOnExit(server: EmbeddedPostgresServer): () => void {
  return () => {
    try {
      const pid = Number(readFileSync(`${server.dataDir}/data/postmaster.pid`, "utf8").split("\n")[0]);
      if (Number.isInteger(pid) && pid > 0) {
        process.kill(pid, "SIGQUIT");
        // An exit handler cannot wait on a promise: a short blocking wait for the server to be gone (at most 5 s),
        // so its files are not removed under it.
        const sleeper = new Int32Array(new SharedArrayBuffer(4));
        for (let i = 0; i < 100 && running(pid); i += 1) Atomics.wait(sleeper, 0, 0, 50);
      }
    } catch {
      // Not running.
    }
    rmSync(server.dataDir, { recursive: true, force: true, maxRetries: 3 });
  };
}

const SIGNALS = ["SIGTERM", "SIGINT", "SIGHUP"] as const;

/**
 * On SIGTERM, SIGINT or SIGHUP (a runner killed, Ctrl-C, a closed terminal) no exit event comes: the server is
 * stopped and its folder removed, then the signal raised again so the process ends as it would have, unless
 * another listener (the runner's own) is there to handle it.
 */
function stopOnSignals(kill: () => void): () => void {
  const unhook = (): void => {
    for (const signal of SIGNALS) process.off(signal, onSignal);
  };
  function onSignal(signal: NodeJS.Signals): void {
    unhook();
    kill();
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  }
  for (const signal of SIGNALS) process.on(signal, onSignal);
  return unhook;
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
