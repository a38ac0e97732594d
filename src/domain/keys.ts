import { DoNotRetryError } from "./errors.ts";
import type { MessageContext } from "./handler.ts";

/** The part of a handler that declares keys (transactional and statements handlers). */
interface Keyed<T> {
  readonly type: string;
  keys?(body: T, context: MessageContext): string | readonly string[];
}

/**
 * A handler's `keys` threw or gave something that is not a key: the same body gives the same answer on every
 * retry, so the message is dead-lettered at once (`NotRetryable`), naming the handler and what was wrong.
 */
export class InvalidKeysError extends DoNotRetryError {
  constructor(type: string, problem: string, options?: { cause?: unknown }) {
    super(`the handler of "${type}": keys() ${problem}`, options);
    this.name = "InvalidKeysError";
  }
}

/**
 * The keys of one message, as its handler declares them: undefined when it declares none (the message may touch
 * anything, so it never runs beside another), else one or more distinct non-empty strings.
 */
export function messageKeys<T>(
  handler: Keyed<T>,
  body: T,
  context: MessageContext,
): readonly string[] | undefined {
  if (handler.keys === undefined) return undefined;
  let given: unknown;
  try {
    given = handler.keys(body, context);
  } catch (error) {
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    throw new InvalidKeysError(handler.type, `threw ${message}`, { cause: error });
  }
  if (typeof given === "string") {
    if (given === "") throw new InvalidKeysError(handler.type, "returned an empty string");
    return [given];
  }
  if (!Array.isArray(given))
    throw new InvalidKeysError(
      handler.type,
      `returned ${describe(given)}, not a string or an array of strings`,
    );
  if (given.length === 0)
    throw new InvalidKeysError(handler.type, "returned an empty array (declare no keys() to mean any row)");
  for (const [i, key] of (given as unknown[]).entries()) {
    if (typeof key !== "string" || key === "")
      throw new InvalidKeysError(
        handler.type,
        `returned ${describe(key)} at index ${i}, not a non-empty string`,
      );
  }
  return [...new Set(given as string[])];
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return value === "" ? "an empty string" : "a string";
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint")
    return `${typeof value} ${value}`;
  return typeof value === "object" ? "an object" : typeof value;
}
