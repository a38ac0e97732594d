import { queueDefaults, type QueueSettings, type TopicSettings } from "./config.ts";
import { DEFAULT_RULE } from "./rules.ts";

/** A topic and the queues its subscriptions forward to, ready for `BrokerConfig.topics` and `.queues`. */
export interface ServiceTopic {
  readonly topic: TopicSettings;
  readonly queues: QueueSettings[];
}

/**
 * A topic as sbinbox deploys one (infra's Bicep does the same, docs/topics.md): duplicate detection on the topic,
 * and for each consuming service a queue of its own, named as the service, with duplicate detection and
 * `queueSettings` (lock, delivery count, TTL), fed by a subscription of the same name with the default true
 * filter that forwards to it, its dead-lettered messages too. The service's worker receives from its queue and sends its retries and replays there,
 * so no other subscription on the topic ever sees them.
 */
export function serviceTopic(
  name: string,
  services: readonly string[],
  queueSettings: Partial<Omit<QueueSettings, "name" | "forwardTo" | "forwardDeadLetteredMessagesTo">> = {},
): ServiceTopic {
  const topic: TopicSettings = {
    name,
    requiresDuplicateDetection: true,
    duplicateDetectionWindowMs: queueDefaults.duplicateDetectionWindowMs,
    defaultTimeToLiveMs: queueDefaults.defaultTimeToLiveMs,
    maxMessageSizeBytes: queueDefaults.maxMessageSizeBytes,
    maxSizeBytes: queueDefaults.maxSizeBytes,
    subscriptions: services.map((service) => ({
      name: service,
      // Nothing is ever received from it: the queue's settings are the ones that count.
      queue: {
        ...queueDefaults,
        name: `${name}/Subscriptions/${service}`,
        requiresDuplicateDetection: false,
        forwardTo: service,
        // What the subscription dead-letters itself (its queue was full) reaches the queue too, once it has space.
        forwardDeadLetteredMessagesTo: service,
      },
      rules: [DEFAULT_RULE],
    })),
  };
  const queues = services.map((service) => ({
    ...queueDefaults,
    ...queueSettings,
    name: service,
    requiresDuplicateDetection: true,
  }));
  return { topic, queues };
}
