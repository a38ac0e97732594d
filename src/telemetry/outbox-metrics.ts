import { metrics, type Counter, type MeterProvider, type ObservableResult } from "@opentelemetry/api";
import { Attr, MESSAGING_SYSTEM, METER_NAME, Metric, destinationAttributes } from "./names.ts";

/** What a relay reports about its outbox: the last status it read (undefined when the read failed). */
export type OutboxStatusSource = () => { lagMs: number; stale: number } | undefined;

interface Instruments {
  readonly provider: MeterProvider;
  readonly sent: Counter;
  readonly setAside: Counter;
}

const sources = new Map<OutboxStatusSource, string>();
let current: Instruments | undefined;

// Created on first use and again when the global provider changes, as in metrics.ts.
function instruments(): Instruments {
  const provider = metrics.getMeterProvider();
  if (current?.provider === provider) return current;
  const meter = provider.getMeter(METER_NAME);
  meter
    .createObservableGauge(Metric.outboxLag, {
      description: "Age of the oldest unsent outbox row: how far the relay is behind the upstream commits.",
      unit: "s",
    })
    .addCallback((result: ObservableResult) => {
      for (const [read, queue] of sources) {
        const status = read();
        if (status) result.observe(status.lagMs / 1000, destination(queue));
      }
    });
  meter
    .createObservableGauge(Metric.outboxStale, {
      description:
        "Unsent outbox rows first tried longer ago than the duplicate-detection window; not sent until an operator decides.",
      unit: "{row}",
    })
    .addCallback((result: ObservableResult) => {
      for (const [read, queue] of sources) {
        const status = read();
        if (status) result.observe(status.stale, destination(queue));
      }
    });
  current = {
    provider,
    sent: meter.createCounter(Metric.outboxSent, {
      description: "Outbox rows accepted by the broker and marked sent.",
      unit: "{row}",
    }),
    setAside: meter.createCounter(Metric.outboxSetAside, {
      description: "Outbox rows the broker refuses for good, set aside with their error.",
      unit: "{row}",
    }),
  };
  return current;
}

function destination(queue: string): Record<string, string> {
  return { [Attr.messagingSystem]: MESSAGING_SYSTEM, ...destinationAttributes(queue) };
}

export const relayMetrics = {
  recordSent(queue: string, count: number): void {
    if (count > 0) instruments().sent.add(count, destination(queue));
  },
  recordSetAside(queue: string, count: number): void {
    if (count > 0) instruments().setAside.add(count, destination(queue));
  },
  /** Reports lag and stale rows from `read` on each collection; returns a function that stops reporting. */
  observeStatus(queue: string, read: OutboxStatusSource): () => void {
    instruments();
    sources.set(read, queue);
    return () => void sources.delete(read);
  },
};
