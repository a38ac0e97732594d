/**
 * Where the worker receives and where copies go: a queue, or a topic's subscription. Everything that needs to know
 * which (the receive link, scheduled retries, replays, telemetry) reads it here, from the entity path the config
 * resolves: "<queue>" or "<topic>/Subscriptions/<subscription>", the path Service Bus itself uses.
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

/** The entity a copy of a received message is sent to: the queue itself, or the subscription's topic. */
export function sendTarget(entity: Entity): string {
  return entity.kind === "queue" ? entity.queue : entity.topic;
}

/**
 * The application property that addresses a copy sent to a topic (a scheduled retry, a replay) to one subscription.
 * A copy sent to a topic reaches every subscription whose rules match it; each sbinbox subscription's rule admits
 * messages without this property and those naming it, so only the subscription that made the copy receives it
 * (docs/topics.md).
 */
export const TARGET_SUBSCRIPTION_PROPERTY = "sbinbox-subscription";

/**
 * The one spelling of a subscription's name that the copy's property, the rule and the default consumer name use:
 * lowercase. Service Bus finds a subscription by name case-insensitively, but a SQL filter's `=` compares strings
 * exactly; a worker configured with "Billing" on a subscription whose rule says 'billing' would otherwise address
 * its retries to a name no rule admits, and Service Bus drops them after the original was completed.
 */
export function canonicalSubscription(subscription: string): string {
  return subscription.toLowerCase();
}

/**
 * The rule each consuming subscription needs, in Service Bus's SQL filter syntax (the Bicep's rule `sbinbox` builds
 * the same text: toLower, quotes doubled).
 */
export function subscriptionRule(subscription: string): string {
  return `NOT EXISTS([${TARGET_SUBSCRIPTION_PROPERTY}]) OR [${TARGET_SUBSCRIPTION_PROPERTY}] = '${canonicalSubscription(subscription).replace(/'/g, "''")}'`;
}

/**
 * What every OTHER subscription on the topic (a service that does not run sbinbox: MassTransit, NServiceBus, the
 * Functions trigger, a plain SDK receiver) must AND into its filter. Service Bus cannot send to one subscription, so
 * sbinbox's retry and replay copies go to the topic with a fresh MessageId; a subscription whose filter does not
 * exclude them receives each one as a new event and its service applies it twice. A correlation filter cannot say
 * "absent": such a subscription needs a SQL filter, e.g. `sys.Label = 'Credit' AND NOT EXISTS([sbinbox-subscription])`.
 */
export const OTHER_SUBSCRIPTION_FILTER = `NOT EXISTS([${TARGET_SUBSCRIPTION_PROPERTY}])`;

/** Properties that keep a copy to this entity: none on a queue, the subscription's canonical name on a topic. */
export function copyTargetProperties(entity: Entity): Record<string, string> {
  return entity.kind === "subscription"
    ? { [TARGET_SUBSCRIPTION_PROPERTY]: canonicalSubscription(entity.subscription) }
    : {};
}
