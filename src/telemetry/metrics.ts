import {
  metrics,
  type Attributes,
  type Counter,
  type Histogram,
  type MeterProvider,
  type ObservableResult,
} from "@opentelemetry/api";
import {
  Attr,
  MESSAGING_SYSTEM,
  METER_NAME,
  Metric,
  type Disposition,
  type Outcome,
  type RetryOutcome,
  destinationAttributes,
} from "./names.ts";

export interface ProcessedRecord {
  readonly queue: string;
  readonly outcome: Outcome;
  /** Wall time from receipt to the end of settlement, in milliseconds. */
  readonly durationMs: number;
  /** Why it failed (error class, SQLSTATE, poison reason); only for poison and failed. */
  readonly errorType?: string;
}

export interface SettlementRecord {
  readonly queue: string;
  readonly disposition: Disposition;
  /** Set when the settlement itself failed (lock lost, link detached): its error code or name. */
  readonly errorType?: string;
}

export interface WorkerMetrics {
  /** Messages received from the queue and handed to processing. */
  recordConsumed(queue: string, count?: number): void;
  /** One message's processing: its duration, its outcome, and a duplicate absorbed by the inbox. */
  recordProcessed(record: ProcessedRecord): void;
  /** One settlement: counted by disposition when it took effect, as a settlement failure when it did not. */
  recordSettlement(record: SettlementRecord): void;
  /** One pause for a database outage, recorded when receiving resumes (or stops for good). */
  recordOutagePause(durationMs: number): void;
  /** One failed attempt's retry: waited out in place, scheduled as a copy, or exhausted (dead-lettered). */
  recordRetry(queue: string, outcome: RetryOutcome, errorClass: string): void;
  /**
   * One batch: its size and how it ended (committed; all_duplicate, no transaction needed; or why it rolled back
   * to the single-message path: deadlock, handler_error, duplicate, other).
   */
  recordBatch(size: number, outcome: string): void;
  /**
   * Reports open two-phase claims on each collection from `read` (e.g. `store.countOpenClaims`).
   * A failing read reports nothing for that collection. Returns a function that stops reporting.
   */
  observeOpenClaims(read: () => number | Promise<number>, attributes?: Attributes): () => void;
}

interface Instruments {
  readonly provider: MeterProvider;
  readonly processDuration: Histogram;
  readonly consumed: Counter;
  readonly outcomes: Counter;
  readonly dispositions: Counter;
  readonly duplicates: Counter;
  readonly settlementFailures: Counter;
  readonly outagePause: Histogram;
  readonly retries: Counter;
  readonly batchSize: Histogram;
}

// The semantic conventions' buckets for messaging durations, in seconds.
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000];
const PAUSE_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600];

type ClaimSource = { read: () => number | Promise<number>; attributes: Attributes };
const claimSources = new Set<ClaimSource>();
let current: Instruments | undefined;

/**
 * Instruments are created from the global meter provider on first use, and again if it changes: the metrics API
 * has no proxy, so an instrument taken before the SDK registered its provider would stay a no-op forever.
 */
function instruments(): Instruments {
  const provider = metrics.getMeterProvider();
  if (current?.provider === provider) return current;
  const meter = provider.getMeter(METER_NAME);
  const openClaims = meter.createObservableGauge(Metric.openClaims, {
    description: "Two-phase claims committed whose external effect is not yet recorded as done.",
    unit: "{claim}",
  });
  openClaims.addCallback(observeClaims);
  current = {
    provider,
    processDuration: meter.createHistogram(Metric.processDuration, {
      description: "Duration of processing one message, settlement included.",
      unit: "s",
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    }),
    consumed: meter.createCounter(Metric.consumedMessages, {
      description: "Messages delivered to the worker.",
      unit: "{message}",
    }),
    outcomes: meter.createCounter(Metric.outcomes, {
      description: "Processed messages by outcome: committed, duplicate, poison, failed.",
      unit: "{message}",
    }),
    dispositions: meter.createCounter(Metric.dispositions, {
      description: "Settlements that took effect, by disposition: complete, abandon, dead_letter.",
      unit: "{message}",
    }),
    duplicates: meter.createCounter(Metric.duplicatesAbsorbed, {
      description: "Redeliveries the inbox recognised as already processed.",
      unit: "{message}",
    }),
    settlementFailures: meter.createCounter(Metric.settlementFailures, {
      description: "Settlements that failed (lock lost, link detached); the broker redelivers.",
      unit: "{message}",
    }),
    outagePause: meter.createHistogram(Metric.outagePause, {
      description: "Time receiving was paused because the database was unreachable.",
      unit: "s",
      advice: { explicitBucketBoundaries: PAUSE_BUCKETS },
    }),
    retries: meter.createCounter(Metric.retries, {
      description: "Retries of failed attempts by outcome: waited (in place), scheduled (a copy), exhausted.",
      unit: "{retry}",
    }),
    batchSize: meter.createHistogram(Metric.batchSize, {
      description: "Messages per group-commit transaction (docs/batching.md).",
      unit: "{message}",
      advice: { explicitBucketBoundaries: BATCH_BUCKETS },
    }),
  };
  return current;
}

async function observeClaims(result: ObservableResult): Promise<void> {
  await Promise.all(
    [...claimSources].map(async (source) => {
      try {
        result.observe(await source.read(), source.attributes);
      } catch {
        // The database is unreachable: no value is better than a wrong zero.
      }
    }),
  );
}

function destination(queue: string): Attributes {
  return { [Attr.messagingSystem]: MESSAGING_SYSTEM, ...destinationAttributes(queue) };
}

/**
 * The attribute sets every message records with, built once per entity and reused: the metrics API has no bound
 * instruments, so this spares each record only the building, not the SDK's own look-up of the set.
 */
interface QueueAttributes {
  readonly destination: Attributes;
  readonly consumed: Attributes;
  readonly processed: Attributes;
  readonly outcomes: Readonly<Record<Outcome, Attributes>>;
  readonly dispositions: Readonly<Record<Disposition, Attributes>>;
}
const queueAttributes = new Map<string, QueueAttributes>();

function attributesOf(queue: string): QueueAttributes {
  const known = queueAttributes.get(queue);
  if (known !== undefined) return known;
  const base = Object.freeze(destination(queue));
  const outcome = (o: Outcome) => Object.freeze({ ...base, [Attr.outcome]: o });
  const disposition = (d: Disposition) => Object.freeze({ ...base, [Attr.dispositionStatus]: d });
  const built: QueueAttributes = {
    destination: base,
    consumed: Object.freeze({ ...base, [Attr.operationName]: "receive" }),
    processed: Object.freeze({ ...base, [Attr.operationName]: "process" }),
    outcomes: {
      committed: outcome("committed"),
      duplicate: outcome("duplicate"),
      poison: outcome("poison"),
      failed: outcome("failed"),
    },
    dispositions: {
      complete: disposition("complete"),
      abandon: disposition("abandon"),
      dead_letter: disposition("dead_letter"),
    },
  };
  if (queueAttributes.size < 64) queueAttributes.set(queue, built);
  return built;
}

const api: WorkerMetrics = {
  recordConsumed(queue, count = 1) {
    instruments().consumed.add(count, attributesOf(queue).consumed);
  },
  recordProcessed({ queue, outcome, durationMs, errorType }) {
    const m = instruments();
    const a = attributesOf(queue);
    const error = errorType !== undefined && (outcome === "failed" || outcome === "poison");
    m.processDuration.record(
      durationMs / 1000,
      error ? { ...a.processed, [Attr.errorType]: errorType } : a.processed,
    );
    m.outcomes.add(1, a.outcomes[outcome]);
    if (outcome === "duplicate") m.duplicates.add(1, a.destination);
  },
  recordSettlement({ queue, disposition, errorType }) {
    const m = instruments();
    const attributes = attributesOf(queue).dispositions[disposition];
    if (errorType === undefined) m.dispositions.add(1, attributes);
    else m.settlementFailures.add(1, { ...attributes, [Attr.errorType]: errorType });
  },
  recordOutagePause(durationMs) {
    instruments().outagePause.record(durationMs / 1000);
  },
  recordRetry(queue, outcome, errorClass) {
    instruments().retries.add(1, {
      ...destination(queue),
      [Attr.retryOutcome]: outcome,
      [Attr.errorType]: errorClass,
    });
  },
  recordBatch(size, outcome) {
    instruments().batchSize.record(size, {
      [Attr.batchOutcome]: outcome === "committed",
      [Attr.batchResult]: outcome,
    });
  },
  observeOpenClaims(read, attributes = {}) {
    instruments();
    const source: ClaimSource = { read, attributes };
    claimSources.add(source);
    return () => void claimSources.delete(source);
  },
};

/** The worker's metrics, recorded on the global meter provider (a no-op until telemetry is started). */
export function workerMetrics(): WorkerMetrics {
  return api;
}
