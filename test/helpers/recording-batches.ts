import type { InboxBatchItem, InboxBatchResult } from "../../src/inbox/core.ts";
import type { InboxStore } from "../../src/inbox/store.ts";

export interface RecordedBatch {
  readonly items: readonly InboxBatchItem[];
  readonly keys: (readonly string[] | undefined)[];
  readonly result: InboxBatchResult;
}

/**
 * The real store, with each batch recorded on its way through (nothing else changes): its size when it starts,
 * its items, keys and result when it ends, and the most batches that ran at once.
 */
export function recordingBatches(store: InboxStore): {
  store: InboxStore;
  sizes: number[];
  batches: RecordedBatch[];
  most: () => number;
} {
  const sizes: number[] = [];
  const batches: RecordedBatch[] = [];
  let running = 0;
  let most = 0;
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      if (property === "processBatch")
        return async (consumer: string, items: readonly InboxBatchItem[]) => {
          sizes.push(items.length);
          running += 1;
          most = Math.max(most, running);
          try {
            const result = await target.processBatch!(consumer, items);
            batches.push({ items, keys: items.map((i) => i.keys), result });
            return result;
          } finally {
            running -= 1;
          }
        };
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: wrapped, sizes, batches, most: () => most };
}
