import type { Logger } from "../telemetry/logger.ts";

/**
 * A handler's plain `Error` (no code, no status, no cause the retry policy reads) is retried as transient, for the
 * whole schedule (up to two hours by default): right for a flaky call, wrong for input that can never succeed. The
 * worker cannot tell the two apart, so it says once per message type, at the first such retry, which errors decide
 * it; every retry is logged as before.
 */
export function plainErrorHint(logger: Logger): (messageType: string | undefined, error: unknown) => void {
  const hinted = new Set<string>();
  return (messageType, error) => {
    const type = messageType ?? "(no type)";
    if (!isPlainError(error) || hinted.has(type)) return;
    hinted.add(type);
    logger.warn(
      "a handler threw a plain Error, which is retried as transient for the whole retry schedule; throw " +
        "DoNotRetryError for input that can never succeed (dead-lettered at once as NotRetryable) or " +
        "RetryAfterError(ms) to choose the wait (both exported by sbinbox). Said once per message type",
      { messageType: type, error },
    );
  };
}

/** An `Error` itself, not a subclass, with nothing on it that the retry policy classifies by. */
function isPlainError(error: unknown): boolean {
  if (!(error instanceof Error) || Object.getPrototypeOf(error) !== Error.prototype) return false;
  const e = error as { code?: unknown; status?: unknown; statusCode?: unknown; number?: unknown };
  return (
    e.code === undefined &&
    e.status === undefined &&
    e.statusCode === undefined &&
    e.number === undefined &&
    error.cause === undefined
  );
}
