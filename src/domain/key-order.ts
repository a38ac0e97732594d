/**
 * Runs `run` for every item, items in arrival order: an item starts once every earlier item that shares a key with
 * it has finished; an item whose keys are undefined (unkeyed: it may touch anything) shares one with every item, so
 * it waits for all before it and all after it wait for it. Items with disjoint keys run at once. `run` must not
 * throw; resolves when every item has finished.
 */
export async function inKeyOrder<T>(
  items: readonly T[],
  keysOf: (item: T) => readonly string[] | undefined,
  run: (item: T) => Promise<void>,
): Promise<void> {
  const finished: Promise<void>[] = [];
  // The last unkeyed item, the keyed items since it, and per key the last item that holds it.
  let barrier: Promise<void> = Promise.resolve();
  let sinceBarrier: Promise<void>[] = [];
  const lastOfKey = new Map<string, Promise<void>>();
  for (const item of items) {
    const keys = keysOf(item);
    const before =
      keys === undefined
        ? [barrier, ...sinceBarrier]
        : [barrier, ...keys.flatMap((k) => lastOfKey.get(k) ?? [])];
    const done = Promise.all(before).then(() => run(item));
    if (keys === undefined) {
      barrier = done;
      sinceBarrier = [];
      lastOfKey.clear();
    } else {
      sinceBarrier.push(done);
      for (const k of keys) lastOfKey.set(k, done);
    }
    finished.push(done);
  }
  await Promise.all(finished);
}
