// The chaos run's handler module (SBINBOX_HANDLERS): the example's handlers, with their downstream calls made over
// HTTP to the external system the chaos process owns (scripts/chaos-downstream.ts, CHAOS_DOWNSTREAM_URL), so every
// call and effect outlives the SIGKILLed workers. Same module name and migrations as the example: the chaos database
// is migrated with the example module.
import { z } from "zod";
import { RetryAfterError } from "../src/domain/errors.ts";
import type { HandlerModule } from "../src/domain/handler-module.ts";
import type { TransactionalHandler } from "../src/domain/handler.ts";
import {
  accountCreditedHandler,
  accountCreditedSchema,
  welcomeEmailHandler,
  type AccountCredited,
  type Mailer,
} from "../src/example/index.ts";
import { exampleModule } from "../src/example/module.ts";

/** What the worker writes to stderr right before the kill-after-perform switch SIGKILLs it (read by chaos-fleet). */
export const KILL_AFTER_PERFORM_LINE = "chaos: killing the process after perform";

/** How long one call may take before the handler gives up (a TimeoutError, transient); the chaos run sets 6 s. */
const DEFAULT_TIMEOUT_MS = 10_000;

/**
 * An HTTP answer that is not 2xx; `status` and `code` (the API's error code, `error.code` in its JSON body) are what
 * the retry policy reads: 5xx, 408, 429 and 409 `idempotency_key_in_use` are transient.
 */
export class DownstreamHttpError extends Error {
  readonly status: number;
  readonly code: string | undefined;
  constructor(status: number, what: string, code?: string) {
    super(`downstream answered ${status}${code ? ` ${code}` : ""} to ${what}`);
    this.name = "DownstreamHttpError";
    this.status = status;
    this.code = code;
  }
}

function errorCode(text: string): string | undefined {
  try {
    const code = (JSON.parse(text) as { error?: { code?: unknown } } | null)?.error?.code;
    return typeof code === "string" ? code : undefined;
  } catch {
    return undefined;
  }
}

function settings(): { url: string; timeoutMs: number; killAfter?: string } {
  const url = process.env.CHAOS_DOWNSTREAM_URL;
  if (!url)
    throw new Error("CHAOS_DOWNSTREAM_URL is not set: the chaos handlers need the fake downstream's URL");
  const timeoutMs = Number(process.env.CHAOS_DOWNSTREAM_TIMEOUT_MS ?? DEFAULT_TIMEOUT_MS);
  if (!(timeoutMs > 0))
    throw new Error("CHAOS_DOWNSTREAM_TIMEOUT_MS must be a positive number of milliseconds");
  return { url, timeoutMs, killAfter: process.env.CHAOS_KILL_AFTER_PERFORM || undefined };
}

async function call(
  url: string,
  timeoutMs: number,
  init: { method: string; key: string; body?: object },
): Promise<unknown> {
  const response = await fetch(url, {
    method: init.method,
    headers: { "idempotency-key": init.key, "content-type": "application/json" },
    body: init.body ? JSON.stringify(init.body) : undefined,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  if (response.ok) return JSON.parse(text) as unknown;
  const retryAfter = Number(response.headers.get("retry-after"));
  if (response.status === 503 && retryAfter > 0) {
    throw new RetryAfterError(retryAfter * 1000, `downstream answered 503, retry after ${retryAfter} s`);
  }
  throw new DownstreamHttpError(response.status, `${init.method} ${new URL(url).pathname}`, errorCode(text));
}

/**
 * The mail API over HTTP, keyed by the handler's idempotency key. `killAfter` names one key: the process whose call
 * made that mail (not a repeated call answered from the first) SIGKILLs itself right after, so the crash between
 * perform() and markProcessed happens exactly once, whichever worker generation gets the message.
 */
export function httpMailer(url: string, timeoutMs: number, killAfter?: string): Mailer {
  return {
    async send(mail) {
      const answer = await call(`${url}/mail`, timeoutMs, {
        method: "POST",
        key: mail.idempotencyKey,
        body: { to: mail.to, subject: mail.subject },
      });
      const repeated = (answer as { repeated?: unknown } | undefined)?.repeated;
      if (mail.idempotencyKey === killAfter && repeated === false) {
        // Said first (a pipe write is synchronous on Linux) so the fleet can tell this switch from the other one.
        process.stderr.write(`${KILL_AFTER_PERFORM_LINE} ${mail.idempotencyKey}\n`);
        process.kill(process.pid, "SIGKILL");
      }
    },
  };
}

const chaosCreditSchema = accountCreditedSchema.extend({
  /** Chaos only: check with the downstream before crediting (a read, no effect there), as a fraud check would. */
  checkDownstream: z.boolean().optional(),
});

/** The example's credit, which first asks the downstream when the event says so. */
function checkedCreditHandler(url: string, timeoutMs: number): TransactionalHandler<AccountCredited> {
  const credit = accountCreditedHandler();
  return {
    ...credit,
    schema: chaosCreditSchema,
    async handle(body, tx, context) {
      if ((body as { checkDownstream?: boolean }).checkDownstream) {
        await call(`${url}/check`, timeoutMs, { method: "GET", key: context.messageId });
      }
      await credit.handle(body, tx, context);
    },
  };
}

export const chaosModule: HandlerModule = {
  name: exampleModule.name,
  migrations: exampleModule.migrations,
  handlers: () => {
    const { url, timeoutMs, killAfter } = settings();
    return [checkedCreditHandler(url, timeoutMs), welcomeEmailHandler(httpMailer(url, timeoutMs, killAfter))];
  },
};

export default chaosModule;
