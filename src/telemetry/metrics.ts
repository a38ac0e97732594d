import {
  type Attributes,
  type Counter,
  type Histogram,
  type Meter,
  type ObservableResult,
} from "@opentelemetry/api";
import { perMeterProvider } from "./meter-cache.ts";
import {
  Attr,
  MESSAGING_SYSTEM,
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
  readonly processDuration: Histogram;
  /** The per-message counters' running totals, reported at each collection (`tallyCounters`). */
  readonly tallies: Map<string, QueueTally>;
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

const instruments = perMeterProvider((meter): Instruments => {
  const openClaims = meter.createObservableGauge(Metric.openClaims, {
    description: "Two-phase claims committed whose external effect is not yet recorded as done.",
    unit: "{claim}",
  });
  openClaims.addCallback(observeClaims);
  return {
    processDuration: meter.createHistogram(Metric.processDuration, {
      description: "Duration of processing one message, settlement included.",
      unit: "s",
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    }),
    tallies: tallyCounters(meter),
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
});

/**
 * The four counters every message adds to (consumed, outcome, disposition, duplicate) as running totals in plain
 * numbers, reported through observable counters when the SDK collects: the same names, units and attribute sets,
 * and the same monotonic Sum (the SDK aggregates an ObservableCounter as one). A different instrument type, though:
 * a temporality selector may differ (OTLP's `lowmemory` sends a Counter as deltas, an ObservableCounter cumulative)
 * and a View selecting instrumentType COUNTER does not match (docs/telemetry.md, "Sampling"). A synchronous counter's `add` hashes its attribute set in the SDK
 * on every call; these cost an addition, and the SDK's work happens once per collection (every 60 s by default).
 */
interface QueueTally {
  readonly attributes: QueueAttributes;
  consumed: number;
  duplicates: number;
  readonly outcomes: Record<Outcome, number>;
  readonly dispositions: Record<Disposition, number>;
}

function tallyCounters(meter: Meter): Map<string, QueueTally> {
  // Per meter provider: a provider registered anew (a test's, a restarted SDK) starts from zero, as its
  // synchronous counters would.
  const tallies = new Map<string, QueueTally>();
  const each =
    (observe: (tally: QueueTally, result: ObservableResult) => void) => (result: ObservableResult) => {
      for (const tally of tallies.values()) observe(tally, result);
    };
  const counter = (
    name: string,
    description: string,
    observe: (t: QueueTally, r: ObservableResult) => void,
  ) => meter.createObservableCounter(name, { description, unit: "{message}" }).addCallback(each(observe));
  counter(Metric.consumedMessages, "Messages delivered to the worker.", (t, r) => {
    if (t.consumed > 0) r.observe(t.consumed, t.attributes.consumed);
  });
  counter(Metric.outcomes, "Processed messages by outcome: committed, duplicate, poison, failed.", (t, r) => {
    for (const outcome of OUTCOMES)
      if (t.outcomes[outcome] > 0) r.observe(t.outcomes[outcome], t.attributes.outcomes[outcome]);
  });
  counter(
    Metric.dispositions,
    "Settlements that took effect, by disposition: complete, abandon, dead_letter.",
    (t, r) => {
      for (const disposition of DISPOSITIONS)
        if (t.dispositions[disposition] > 0)
          r.observe(t.dispositions[disposition], t.attributes.dispositions[disposition]);
    },
  );
  counter(Metric.duplicatesAbsorbed, "Redeliveries the inbox recognised as already processed.", (t, r) => {
    if (t.duplicates > 0) r.observe(t.duplicates, t.attributes.destination);
  });
  return tallies;
}

const OUTCOMES: readonly Outcome[] = ["committed", "duplicate", "poison", "failed"];
const DISPOSITIONS: readonly Disposition[] = ["complete", "abandon", "dead_letter"];

/** The running totals of one entity; kept for every entity the worker records (a worker has a few). */
function tallyOf(m: Instruments, queue: string): QueueTally {
  let tally = m.tallies.get(queue);
  if (tally === undefined) {
    tally = {
      attributes: attributesOf(queue),
      consumed: 0,
      duplicates: 0,
      outcomes: { committed: 0, duplicate: 0, poison: 0, failed: 0 },
      dispositions: { complete: 0, abandon: 0, dead_letter: 0 },
    };
    m.tallies.set(queue, tally);
  }
  return tally;
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

/** A batch's attribute set, built once per outcome (a batch records one). */
const batchSets = new Map<string, Attributes>();
function batchAttributes(outcome: string): Attributes {
  let set = batchSets.get(outcome);
  if (set === undefined) {
    set = Object.freeze({ [Attr.batchOutcome]: outcome === "committed", [Attr.batchResult]: outcome });
    if (batchSets.size < 16) batchSets.set(outcome, set);
  }
  return set;
}

const api: WorkerMetrics = {
  recordConsumed(queue, count = 1) {
    tallyOf(instruments(), queue).consumed += count;
  },
  recordProcessed({ queue, outcome, durationMs, errorType }) {
    const m = instruments();
    const a = attributesOf(queue);
    const error = errorType !== undefined && (outcome === "failed" || outcome === "poison");
    m.processDuration.record(
      durationMs / 1000,
      error ? { ...a.processed, [Attr.errorType]: errorType } : a.processed,
    );
    const tally = tallyOf(m, queue);
    tally.outcomes[outcome] += 1;
    if (outcome === "duplicate") tally.duplicates += 1;
  },
  recordSettlement({ queue, disposition, errorType }) {
    const m = instruments();
    if (errorType === undefined) tallyOf(m, queue).dispositions[disposition] += 1;
    else
      m.settlementFailures.add(1, {
        ...attributesOf(queue).dispositions[disposition],
        [Attr.errorType]: errorType,
      });
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
    instruments().batchSize.record(size, batchAttributes(outcome));
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
