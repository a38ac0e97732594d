import type { InboxBatchItem, InboxBatchResult, InboxStore } from "../../src/inbox/store.ts";

/** The real store, with each batch's items and result recorded on its way through (nothing else changes). */
export function recordingBatches(store: InboxStore): {
  store: InboxStore;
  sizes: number[];
  batches: { items: readonly InboxBatchItem[]; result: InboxBatchResult }[];
} {
  const sizes: number[] = [];
  const batches: { items: readonly InboxBatchItem[]; result: InboxBatchResult }[] = [];
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      if (property === "processBatch")
        return async (consumer: string, items: readonly InboxBatchItem[]) => {
          sizes.push(items.length);
          const result = await target.processBatch!(consumer, items);
          batches.push({ items, result });
          return result;
        };
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: wrapped, sizes, batches };
}
