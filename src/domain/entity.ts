/**
 * An entity path as Service Bus writes it: "<queue>" or "<topic>/Subscriptions/<subscription>". The worker and its
 * copies use queues only; a subscription's path is read where one may be named: peeking or purging a subscription's
 * dead-letter queue, and telemetry.
 */
export type Entity =
  | { readonly kind: "queue"; readonly path: string; readonly queue: string }
  | {
      readonly kind: "subscription";
      readonly path: string;
      readonly topic: string;
      readonly subscription: string;
    };

const SUBSCRIPTION_PATH = /^(.+)\/subscriptions\/([^/]+)$/i;

export function parseEntity(path: string): Entity {
  const match = SUBSCRIPTION_PATH.exec(path);
  if (match) return { kind: "subscription", path, topic: match[1]!, subscription: match[2]! };
  return { kind: "queue", path, queue: path };
}

export function subscriptionPath(topic: string, subscription: string): string {
  return `${topic}/Subscriptions/${subscription}`;
}

/**
 * The worker receives from a queue only: on a topic, the service's subscription forwards to the service's own queue
 * (docs/topics.md). A subscription path is refused where a receiver would be made on it, naming the way instead.
 */
export function refuseSubscription(path: string, what: string): void {
  const entity = parseEntity(path);
  if (entity.kind === "subscription")
    throw new TypeError(
      `${what} receives from a queue, not from the subscription "${path}": forward the subscription to the service's own queue (ForwardTo) and name that queue (docs/topics.md)`,
    );
}
