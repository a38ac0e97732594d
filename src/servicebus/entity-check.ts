/** What the start-up check reads of a receiver (QueueReceiver, SessionQueueReceiver). */
export interface EntityAnswer {
  /** Set when the entity refused the receiver's kind (a session receiver on a plain entity, or the reverse). */
  readonly mismatch: Error | undefined;
  /** The entity took the receiver's link: no refusal of its kind will come. */
  readonly entityAnswered: boolean;
}

/**
 * Waits for the entity's first answer to the worker's own receive link: the refusal of a receiver of the wrong kind
 * (returned, for start-up to exit with it), or the link taken (undefined). Service Bus gives either when the link is
 * attached, so this is about a second; after `ms` without either it returns undefined, and a refusal that comes later
 * still stops receiving (readiness `receiver: "detached"`). Looks every 50 ms: the SDK has no event for an opened link.
 */
export async function entityAnswer(receiver: EntityAnswer, ms: number): Promise<Error | undefined> {
  const deadline = Date.now() + ms;
  while (receiver.mismatch === undefined && !receiver.entityAnswered && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 50));
  return receiver.mismatch;
}
