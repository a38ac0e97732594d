// The shapes of a parsed broker config, and the error that names a bad setting: a leaf every entity, the config
// parser and the forwarding check import, so none of them imports another for its types.
import type { Rule } from "./rules.ts";

/** Settings of one queue, in milliseconds and bytes. */
export interface QueueSettings {
  name: string;
  lockDurationMs: number;
  maxDeliveryCount: number;
  requiresDuplicateDetection: boolean;
  duplicateDetectionWindowMs: number;
  defaultTimeToLiveMs: number;
  deadLetteringOnMessageExpiration: boolean;
  maxMessageSizeBytes: number;
  /** MaxSizeInMegabytes: the entity's size cap, dead-letter subqueue included; a send past it is QuotaExceeded. */
  maxSizeBytes: number;
  /** ForwardTo: the queue or topic every message is forwarded to; such an entity cannot be received from. */
  forwardTo?: string;
  /** ForwardDeadLetteredMessagesTo: where the dead-letter subqueue forwards to; it then cannot be received from. */
  forwardDeadLetteredMessagesTo?: string;
  /** RequiresSession: every message carries a session id and is received through a session lock (sessions.ts). */
  requiresSession: boolean;
}

/** A subscription: a queue of its own (locks, delivery count, dead-letter subqueue) fed by its rules. */
export interface SubscriptionSettings {
  name: string;
  queue: QueueSettings;
  rules: Rule[];
}

/** A topic: duplicate detection, size and time to live are the topic's; delivery is the subscriptions'. */
export interface TopicSettings {
  name: string;
  requiresDuplicateDetection: boolean;
  duplicateDetectionWindowMs: number;
  defaultTimeToLiveMs: number;
  maxMessageSizeBytes: number;
  maxSizeBytes: number;
  subscriptions: SubscriptionSettings[];
}

export interface BrokerConfig {
  namespace: string;
  queues: QueueSettings[];
  topics: TopicSettings[];
  /** Parts of the file that were read but are not served; the CLI prints them. */
  warnings: string[];
  /** `Throttling` of the namespace: which operations are answered ServerBusy (throttle.ts). */
  throttling?: ThrottleSettings;
}

/**
 * The operations Service Bus Standard counts against a namespace's credits (learn.microsoft.com, "Throttling
 * operations on Azure Service Bus"), as the local broker groups them: sends (link transfers, scheduling), receives
 * (deliveries on a link, receive-by-sequence-number, peek), settlements (dispositions, update-disposition) and the
 * other `$management` requests (renew-lock, session state, rules, batch delete).
 */
export const THROTTLE_KINDS = ["send", "receive", "settle", "management"] as const;
export type ThrottleKind = (typeof THROTTLE_KINDS)[number];

/**
 * One kind's throttling: `share` refuses that share of its operations (0.3: three in ten, spread evenly, so no
 * operation is refused forever), `creditsPerSecond` refuses what goes past that many credits in each second (a
 * message is one credit, as on Standard; rule management ten), as Standard refills its credits each second.
 */
export interface ThrottleRule {
  readonly share?: number;
  readonly creditsPerSecond?: number;
}

export type ThrottleSettings = Partial<Record<ThrottleKind, ThrottleRule>>;

/** A config error names the JSON path of the bad setting. */
export class BrokerConfigError extends Error {
  readonly field: string;
  constructor(field: string, problem: string) {
    super(`invalid broker config: ${field} ${problem}`);
    this.name = "BrokerConfigError";
    this.field = field;
  }
}
