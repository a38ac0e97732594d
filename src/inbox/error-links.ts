/**
 * The first error in `error`'s chain (itself, then its `cause` and an AggregateError's `errors`, breadth first)
 * for which `isDriverError` holds (the store's own driver raised it; also used for any mark an error carries), or
 * undefined. Handlers often wrap what their statement threw
 * (`new Error(msg, { cause })`, `AggregateError`): an outage on the store's connection must stay an outage
 * however deep the handler put it, while the same codes on an error the handler built stay the handler's.
 */
export function driverErrorInChain(
  error: unknown,
  isDriverError: (e: object) => boolean,
): object | undefined {
  const seen = new Set<object>();
  let level: unknown[] = [error];
  // A handler's wrapping is a few links deep; the bound guards against a cycle built by hand.
  for (let depth = 0; depth < 8 && level.length > 0; depth += 1) {
    const next: unknown[] = [];
    for (const e of level) {
      if (typeof e !== "object" || e === null || seen.has(e)) continue;
      seen.add(e);
      if (isDriverError(e)) return e;
      next.push((e as { cause?: unknown }).cause);
      if (e instanceof AggregateError) next.push(...(e.errors as unknown[]));
    }
    level = next;
  }
  return undefined;
}
