import type { Counter, ObservableResult } from "@opentelemetry/api";
import { perMeterProvider } from "./meter-cache.ts";
import { Attr, MESSAGING_SYSTEM, Metric, destinationAttributes } from "./names.ts";

/** What a relay reports about its outbox: the last status it read (undefined when the read failed). */
export type OutboxStatusSource = () => { lagMs: number; stale: number } | undefined;

interface Instruments {
  readonly sent: Counter;
  readonly setAside: Counter;
}

const sources = new Map<OutboxStatusSource, string>();

const instruments = perMeterProvider((meter): Instruments => {
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
  return {
    sent: meter.createCounter(Metric.outboxSent, {
      description: "Outbox rows accepted by the broker and marked sent.",
      unit: "{row}",
    }),
    setAside: meter.createCounter(Metric.outboxSetAside, {
      description: "Outbox rows the broker refuses for good, set aside with their error.",
      unit: "{row}",
    }),
  };
});

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
