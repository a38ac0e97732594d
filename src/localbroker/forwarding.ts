import { messageIdKey, type MessageParts } from "./codec.ts";
import { MAX_TRANSFER_HOPS } from "./forwarding-check.ts";
import type { Consumer, Queue, StoredMessage } from "./queue.ts";
import { NO_SESSION_ID_REASON, NO_SESSION_ID_SEND, sessionIdOfParts } from "./sessions.ts";
import type { Topic } from "./topic.ts";

/**
 * Autoforwarding as Service Bus does it (learn.microsoft.com, "Chaining Service Bus entities with autoforwarding";
 * "Overview of Service Bus dead-letter queues", section "Dead-lettering in auto forward scenarios"): a queue or a
 * subscription with ForwardTo hands each message, as it becomes available, to a queue or topic of the namespace.
 * The message keeps its MessageId, properties and body; the destination treats it as a send, so its duplicate
 * detection, time to live, size cap and MaxDeliveryCount apply there. The source cannot be received from.
 */

export const HOP_LIMIT_REASON = "MaxTransferHopCountExceeded";
/** The description Service Bus's dead-letter table gives the reason. */
export const HOP_LIMIT_DESCRIPTION =
  "The maximum number of allowed hops when forwarding between queues has been exceeded. This value is set to 4.";

/**
 * Microsoft documents what happens (the source's dead-letter queue) but not the reason it writes; this one is the
 * local broker's, named after the SDKs' QuotaExceeded.
 */
export const DESTINATION_FULL_REASON = "ForwardingDestinationQuotaExceeded";

/** What Service Bus answers a receive link on a forwarding entity with. */
export const RECEIVE_REFUSED = "Cannot create a message receiver on an entity with auto-forwarding enabled.";

/**
 * How many times a message was forwarded, kept beside its parts under a symbol: never encoded, so no client sees
 * it, and copied with the parts' head when a topic fans a message out.
 */
const HOPS = Symbol("sbinbox.transferHops");

export function transferHops(parts: MessageParts): number {
  return (parts.head as { [HOPS]?: number })[HOPS] ?? 0;
}

function setTransferHops(parts: MessageParts, hops: number): void {
  (parts.head as { [HOPS]?: number })[HOPS] = hops;
}

export type Destination = Queue | Topic;

/**
 * The forwarding "receiver" on a source entity: unlimited credit, peek-lock, and each message settled at once: sent
 * on and completed, or dead-lettered in the source when it is past the hop limit or the destination is full (the
 * docs: "the source entity adds the messages to its dead-letter queue until there's space in the destination").
 * All in one synchronous step, so no message is ever in both entities or in neither.
 */
export class Forwarder implements Consumer {
  readonly receiveAndDelete = false;
  private readonly source: Queue;
  private readonly destination: Destination;
  /**
   * On a dead-letter queue (ForwardDeadLetteredMessagesTo) a message the full destination cannot take stays where it
   * is, as there is no further dead-letter queue: forwarding waits until this many bytes fit, and `retry` resumes it
   * ("the messages will remain in the DLQ on the origin entity until the destination entity is cleaned up, at which
   * point the messages will be forwarded again", Azure/azure-service-bus#666).
   */
  private waitingFor: number | undefined;

  constructor(source: Queue, destination: Destination) {
    this.source = source;
    this.destination = destination;
  }

  credit(): number {
    if (this.waitingFor !== undefined) {
      if (this.destination.quotaExceeded(this.waitingFor) !== undefined) return 0;
      this.waitingFor = undefined;
    }
    return Number.POSITIVE_INFINITY;
  }

  /** Called by the broker's timer: forwarding that waited for space goes on once there is. */
  retry(): void {
    if (this.waitingFor !== undefined) this.source.pump();
  }

  isClosed(): boolean {
    return false;
  }

  deliver(message: StoredMessage, lockToken: string | undefined): void {
    if (lockToken === undefined) return;
    const parts = message.parts;
    const hops = transferHops(parts);
    if (hops >= MAX_TRANSFER_HOPS && this.source.isDeadLetterQueue) {
      // Dead-lettering in a dead-letter queue would drop it: it stays there, unforwarded, under a lock that is
      // taken again each time it runs out, as Azure leaves it (Azure/azure-service-bus#249).
      return;
    }
    if (hops >= MAX_TRANSFER_HOPS) {
      this.source.settle(lockToken, {
        kind: "deadLetter",
        reason: HOP_LIMIT_REASON,
        description: HOP_LIMIT_DESCRIPTION,
      });
      return;
    }
    if (
      "sessions" in this.destination &&
      this.destination.sessions !== undefined &&
      sessionIdOfParts(parts) === undefined
    ) {
      // Service Bus dead-letters it here, in the source, not in the session queue (Azure/azure-sdk-for-net#60600):
      // the destination refuses it as it refuses such a send. From a dead-letter queue (the Bicep's
      // forwardDeadLetteredMessagesTo) it stays where it is, as past the hop limit above.
      if (this.source.isDeadLetterQueue) return;
      this.source.settle(lockToken, {
        kind: "deadLetter",
        reason: NO_SESSION_ID_REASON,
        description: `Could not forward to '${this.destination.name}': ${NO_SESSION_ID_SEND}`,
      });
      return;
    }
    const full = this.destination.quotaExceeded(parts.size);
    if (full !== undefined && this.source.isDeadLetterQueue) {
      // Back to the dead-letter queue's head, in order; abandoning there counts a delivery and never drops it.
      this.waitingFor = parts.size;
      this.source.settle(lockToken, { kind: "abandon" });
      return;
    }
    if (full !== undefined) {
      this.source.settle(lockToken, {
        kind: "deadLetter",
        reason: DESTINATION_FULL_REASON,
        description: `Could not forward to '${this.destination.name}': ${full}`,
      });
      return;
    }
    setTransferHops(parts, hops + 1);
    // The server gave every message an id on its first send, so the key always exists here.
    this.destination.send(parts, messageIdKey(parts.head.message_id) ?? "");
    this.source.settle(lockToken, { kind: "complete" });
  }
}

/**
 * Attaches a Forwarder to every source with ForwardTo, and to its dead-letter queue with
 * ForwardDeadLetteredMessagesTo; `find` resolves a destination (checkForwarding ran). Returns the forwarders, for
 * the broker's timer to `retry`.
 */
export function startForwarding(
  sources: Queue[],
  find: (name: string) => Destination | undefined,
): Forwarder[] {
  const forwarders: Forwarder[] = [];
  const attach = (queue: Queue, to: string): void => {
    const destination = find(to);
    if (!destination) throw new Error(`forwarding destination "${to}" not found`);
    const forwarder = new Forwarder(queue, destination);
    forwarders.push(forwarder);
    queue.addConsumer(forwarder);
  };
  for (const queue of sources) {
    const { forwardTo, forwardDeadLetteredMessagesTo } = queue.settings;
    if (forwardTo !== undefined) attach(queue, forwardTo);
    if (forwardDeadLetteredMessagesTo !== undefined && queue.deadLetter)
      attach(queue.deadLetter, forwardDeadLetteredMessagesTo);
  }
  return forwarders;
}

/**
 * True when no client may receive from this entity: it forwards. A dead-letter queue shares its parent's settings,
 * so for it ForwardDeadLetteredMessagesTo decides.
 */
export function forwards(queue: Queue): boolean {
  return (
    (queue.isDeadLetterQueue ? queue.settings.forwardDeadLetteredMessagesTo : queue.settings.forwardTo) !==
    undefined
  );
}
