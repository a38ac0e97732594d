import { isServiceBusError, type ServiceBusClient, type ServiceBusReceiver } from "@azure/service-bus";
import { createEntityReceiver } from "./entity-receiver.ts";
import { within } from "../domain/within.ts";

/** Asks the broker one cheap question on the client's own connection; resolves when it answered. */
export interface LinkProbe {
  /** Resolves when the broker answered (a refusal is an answer too); rejects when it did not within `timeoutMs`. */
  check(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

/** Codes the SDK gives when nothing came back from the broker, as opposed to a refusal the broker sent. */
const NO_ANSWER = new Set(["ServiceCommunicationProblem", "ServiceTimeout"]);

/**
 * Whether an SDK error was made locally, without an answer from the broker: the codes above, and the
 * SessionLockLost the SDK raises itself when a session's link is "no longer alive" (it never sends the settlement).
 * An AggregateError (the SDK's retries) is local when all its attempts were.
 */
/** The Service Bus error code of `error`, if it is one of the SDK's errors. */
export function serviceBusCode(error: unknown): string | undefined {
  return isServiceBusError(error) ? error.code : undefined;
}

export function isNoAnswer(error: unknown): boolean {
  if (error instanceof AggregateError)
    return error.errors.length > 0 && (error.errors as unknown[]).every(isNoAnswer);
  if (!isServiceBusError(error)) return false;
  return (
    NO_ANSWER.has(error.code) || (error.code === "SessionLockLost" && /no longer alive/.test(error.message))
  );
}

/**
 * A `peekMessages(1)` on a receiver of the worker's own client, so it travels on the same AMQP connection as the
 * receive link (one connection per client) and answers whether that connection still carries anything. It takes
 * no lock and needs only the Listen right the worker has. The receiver is never subscribed, so it opens no receive
 * link; the SDK's `$management` link for the entity is the one lock renewals use.
 */
export function createLinkProbe(client: ServiceBusClient, entityPath: string): LinkProbe {
  let receiver: ServiceBusReceiver | undefined;
  return {
    async check(timeoutMs) {
      receiver ??= createEntityReceiver(client, entityPath, { receiveMode: "peekLock" });
      const controller = new AbortController();
      const peek = receiver.peekMessages(1, { abortSignal: controller.signal }).then(
        () => undefined,
        (error: unknown) => {
          if (controller.signal.aborted) return; // the time-out below reports it
          if (isServiceBusError(error) && !isNoAnswer(error)) return; // the broker answered: a refusal
          throw error;
        },
      );
      try {
        if (!(await within(peek, timeoutMs))) {
          controller.abort();
          throw new Error(`no answer from Service Bus within ${timeoutMs} ms`);
        }
      } finally {
        peek.catch(() => undefined);
      }
    },
    async close() {
      await receiver?.close();
      receiver = undefined;
    },
  };
}
