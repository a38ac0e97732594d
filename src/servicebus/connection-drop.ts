import type {
  ServiceBusClient,
  ServiceBusMessage,
  ServiceBusMessageBatch,
  ServiceBusSender,
} from "@azure/service-bus";

/**
 * One send, abandoned when its connection drops. The SDK leaves a delivery in flight on a dropped connection
 * unsettled until rhea-promise's send timer fires (the operation timeout, a minute by default), and in rhea-promise
 * 3.0.3 that timer then reads the closed link's address and throws out of the timer: an uncaught exception that ends
 * the process (amqp/rhea-promise#109, fixed by #119, which no release has yet). Aborting the send clears that timer,
 * so the failure comes at once, as an `ECONNRESET` error (transient: a resend may succeed). The connection is the
 * SDK's internal `_connectionContext.connection` (no public event says it dropped), read per send since the SDK
 * replaces it after a drop; with an SDK without it only the early abort is lost. An abort of `signal` (the caller's
 * own) passes through as the SDK's AbortError.
 */
export async function sendUnlessDropped(
  client: ServiceBusClient,
  sender: Pick<ServiceBusSender, "sendMessages">,
  message: ServiceBusMessage | ServiceBusMessage[] | ServiceBusMessageBatch,
  signal?: AbortSignal,
): Promise<void> {
  const connection = currentConnection(client);
  if (connection === undefined) return sender.sendMessages(message, signal ? { abortSignal: signal } : {});
  const abort = new AbortController();
  let dropped = false;
  const onDrop = () => {
    dropped = true;
    abort.abort();
  };
  const onAbort = () => abort.abort();
  connection.once("disconnected", onDrop);
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) abort.abort();
  try {
    return await sender.sendMessages(message, { abortSignal: abort.signal });
  } catch (error) {
    if (!dropped) throw error;
    throw Object.assign(
      new Error("the connection to Service Bus dropped with this send in flight", { cause: error }),
      {
        code: "ECONNRESET",
      },
    );
  } finally {
    connection.removeListener("disconnected", onDrop);
    signal?.removeEventListener("abort", onAbort);
  }
}

/** What `sendUnlessDropped` needs of the SDK's AMQP connection (rhea-promise's, which re-emits rhea's events). */
interface DroppableConnection {
  once(event: "disconnected", listener: () => void): unknown;
  removeListener(event: "disconnected", listener: () => void): unknown;
}

/** The client's current AMQP connection in @azure/service-bus 7; undefined if the SDK's internals differ. */
function currentConnection(client: ServiceBusClient): DroppableConnection | undefined {
  const connection = (
    client as unknown as { _connectionContext?: { connection?: Partial<DroppableConnection> } }
  )._connectionContext?.connection;
  return typeof connection?.once === "function" && typeof connection.removeListener === "function"
    ? (connection as DroppableConnection)
    : undefined;
}
