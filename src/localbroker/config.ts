import { readFile } from "node:fs/promises";
import { parseIsoDuration } from "./duration.ts";
import { DEFAULT_RULE } from "./rules.ts";
import { isObject, parseRule, type Json } from "./config-rules.ts";
import {
  BrokerConfigError,
  type BrokerConfig,
  type QueueSettings,
  type SubscriptionSettings,
  type TopicSettings,
} from "./entity-settings.ts";
import { checkForwarding } from "./forwarding-check.ts";
import { parseThrottling } from "./throttle.ts";

// The shapes are declared in the leaf; importers of the config find them here too.
export * from "./entity-settings.ts";

export const DEFAULT_QUEUE_NAME = "sbinbox";

/**
 * Defaults follow a Standard-tier queue, except duplicate detection, which sbinbox relies on: on for the built-in
 * `sbinbox` queue and for queues built in code from these defaults (the demo, the test harness). A queue or topic
 * of a config file that does not set `RequiresDuplicateDetection` has it off (`FILE_DUPLICATE_DETECTION`).
 */
export const queueDefaults: Omit<QueueSettings, "name"> = {
  lockDurationMs: 30_000,
  maxDeliveryCount: 10,
  requiresDuplicateDetection: true,
  duplicateDetectionWindowMs: 10 * 60_000,
  defaultTimeToLiveMs: 60 * 60_000,
  deadLetteringOnMessageExpiration: false,
  maxMessageSizeBytes: 256 * 1024,
  // Azure's smallest MaxSizeInMegabytes, 1 GB.
  maxSizeBytes: 1024 * 1024 * 1024,
  requiresSession: false,
};

/**
 * A config file's default for `RequiresDuplicateDetection`: off, as on Azure (learn.microsoft.com, "Duplicate
 * detection": "disabled by default") and in the official emulator, so a file means the same to both.
 */
export const FILE_DUPLICATE_DETECTION = false;

export function defaultConfig(): BrokerConfig {
  return {
    namespace: "sbinbox-local",
    queues: [{ name: DEFAULT_QUEUE_NAME, ...queueDefaults }],
    topics: [],
    warnings: [],
  };
}

export async function loadConfigFile(path: string): Promise<BrokerConfig> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new BrokerConfigError(path, `cannot be read: ${(error as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new BrokerConfigError(path, `is not valid JSON: ${(error as Error).message}`);
  }
  return parseConfig(json);
}

/**
 * Reads the official Service Bus emulator's Config.json shape: UserConfig.Namespaces[].Queues[].Properties and
 * Topics[].Subscriptions[].Rules[]. One namespace, as the emulator. Entity names are unique per namespace, queues
 * and topics together, as on Service Bus.
 */
export function parseConfig(json: unknown): BrokerConfig {
  if (!isObject(json)) throw new BrokerConfigError("(root)", "must be a JSON object");
  const user = json["UserConfig"];
  if (!isObject(user)) throw new BrokerConfigError("UserConfig", "must be an object");
  const namespaces = user["Namespaces"];
  if (!Array.isArray(namespaces) || namespaces.length === 0)
    throw new BrokerConfigError("UserConfig.Namespaces", "must be a non-empty array");
  if (namespaces.length > 1)
    throw new BrokerConfigError("UserConfig.Namespaces", "must hold exactly one namespace (as the emulator)");
  const ns: unknown = namespaces[0];
  const nsPath = "UserConfig.Namespaces[0]";
  if (!isObject(ns)) throw new BrokerConfigError(nsPath, "must be an object");
  const name = ns["Name"];
  if (typeof name !== "string" || name === "")
    throw new BrokerConfigError(`${nsPath}.Name`, "must be a non-empty string");
  const rawTopics = ns["Topics"] ?? [];
  if (!Array.isArray(rawTopics)) throw new BrokerConfigError(`${nsPath}.Topics`, "must be an array");
  const rawQueues = ns["Queues"] ?? [];
  if (!Array.isArray(rawQueues)) throw new BrokerConfigError(`${nsPath}.Queues`, "must be an array");
  if (rawQueues.length === 0 && rawTopics.length === 0)
    throw new BrokerConfigError(`${nsPath}.Queues`, "must be a non-empty array (or Topics must be)");
  const queues = rawQueues.map((q: unknown, i) => parseQueue(q, `${nsPath}.Queues[${i}]`));
  const warnings: string[] = [];
  const topics = rawTopics.map((t: unknown, i) => parseTopic(t, `${nsPath}.Topics[${i}]`, warnings));
  const seen = new Set<string>();
  const entities = [
    ...queues.map((q, i) => ({ name: q.name, path: `${nsPath}.Queues[${i}].Name` })),
    ...topics.map((t, i) => ({ name: t.name, path: `${nsPath}.Topics[${i}].Name` })),
  ];
  for (const entity of entities) {
    const key = entity.name.toLowerCase();
    if (seen.has(key)) throw new BrokerConfigError(entity.path, `"${entity.name}" is declared twice`);
    seen.add(key);
  }
  const throttling = parseThrottling(ns["Throttling"], `${nsPath}.Throttling`);
  const config = { namespace: name, queues, topics, warnings, throttling };
  checkForwarding(config);
  return config;
}

const ENTITY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,259}$/;
const SUBSCRIPTION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$/;

function parseTopic(raw: unknown, path: string, warnings: string[]): TopicSettings {
  if (!isObject(raw)) throw new BrokerConfigError(path, "must be an object");
  const name = raw["Name"];
  if (typeof name !== "string" || !ENTITY_NAME.test(name))
    throw new BrokerConfigError(`${path}.Name`, "must be a topic name (letters, digits, '.', '_', '-')");
  const props = raw["Properties"] ?? {};
  if (!isObject(props)) throw new BrokerConfigError(`${path}.Properties`, "must be an object");
  const p = `${path}.Properties`;
  const topic: TopicSettings = {
    name,
    requiresDuplicateDetection: boolean(props, "RequiresDuplicateDetection", p, FILE_DUPLICATE_DETECTION),
    duplicateDetectionWindowMs: duration(
      props,
      "DuplicateDetectionHistoryTimeWindow",
      p,
      queueDefaults.duplicateDetectionWindowMs,
    ),
    defaultTimeToLiveMs: duration(props, "DefaultMessageTimeToLive", p, queueDefaults.defaultTimeToLiveMs),
    maxMessageSizeBytes:
      integer(props, "MaxMessageSizeInKilobytes", p, queueDefaults.maxMessageSizeBytes / 1024, 1) * 1024,
    maxSizeBytes:
      integer(
        props,
        "MaxSizeInMegabytes",
        p,
        queueDefaults.maxSizeBytes / (1024 * 1024),
        1,
        MAX_SIZE_IN_MEGABYTES,
      ) *
      1024 *
      1024,
    subscriptions: [],
  };
  const rawSubscriptions = raw["Subscriptions"];
  if (!Array.isArray(rawSubscriptions) || rawSubscriptions.length === 0)
    throw new BrokerConfigError(`${path}.Subscriptions`, "must be a non-empty array");
  const seen = new Set<string>();
  rawSubscriptions.forEach((s: unknown, i) => {
    const sub = parseSubscription(s, `${path}.Subscriptions[${i}]`, topic, warnings);
    if (seen.has(sub.name.toLowerCase()))
      throw new BrokerConfigError(`${path}.Subscriptions[${i}].Name`, `"${sub.name}" is declared twice`);
    seen.add(sub.name.toLowerCase());
    topic.subscriptions.push(sub);
  });
  return topic;
}

function parseSubscription(
  raw: unknown,
  path: string,
  topic: TopicSettings,
  warnings: string[],
): SubscriptionSettings {
  if (!isObject(raw)) throw new BrokerConfigError(path, "must be an object");
  const name = raw["Name"];
  if (typeof name !== "string" || !SUBSCRIPTION_NAME.test(name))
    throw new BrokerConfigError(
      `${path}.Name`,
      "must be a subscription name (1 to 50 letters, digits, '.', '_', '-')",
    );
  const props = raw["Properties"] ?? {};
  if (!isObject(props)) throw new BrokerConfigError(`${path}.Properties`, "must be an object");
  const p = `${path}.Properties`;
  // Duplicate detection is the topic's: the subscription's own queue never drops a copy.
  const queue: QueueSettings = {
    ...queueDefaults,
    name: `${topic.name}/Subscriptions/${name}`,
    requiresDuplicateDetection: false,
    maxMessageSizeBytes: topic.maxMessageSizeBytes,
    maxSizeBytes: topic.maxSizeBytes,
  };
  queue.lockDurationMs = duration(props, "LockDuration", p, queue.lockDurationMs);
  queue.maxDeliveryCount = integer(props, "MaxDeliveryCount", p, queue.maxDeliveryCount, 1);
  // A subscription's TTL is the smaller of its own and the topic's, as Service Bus applies it.
  queue.defaultTimeToLiveMs = Math.min(
    duration(props, "DefaultMessageTimeToLive", p, topic.defaultTimeToLiveMs),
    topic.defaultTimeToLiveMs,
  );
  queue.deadLetteringOnMessageExpiration = boolean(
    props,
    "DeadLetteringOnMessageExpiration",
    p,
    queue.deadLetteringOnMessageExpiration,
  );
  queue.requiresSession = boolean(props, "RequiresSession", p, false);
  readForwarding(props, p, queue);
  const rawRules = raw["Rules"] ?? [];
  if (!Array.isArray(rawRules)) throw new BrokerConfigError(`${path}.Rules`, "must be an array");
  const rules =
    rawRules.length === 0
      ? [DEFAULT_RULE]
      : rawRules.map((r: unknown, i) => parseRule(r, `${path}.Rules[${i}]`, warnings));
  return { name, queue, rules };
}

/**
 * ForwardTo and ForwardDeadLetteredMessagesTo: a queue's or topic's name in this namespace (checked against the
 * entities once all are read, src/localbroker/forwarding.ts).
 */
function readForwarding(props: Json, p: string, settings: QueueSettings): void {
  for (const [key, field] of [
    ["ForwardTo", "forwardTo"],
    ["ForwardDeadLetteredMessagesTo", "forwardDeadLetteredMessagesTo"],
  ] as const) {
    const value = props[key];
    if (value === undefined || value === null || value === "") continue;
    if (typeof value !== "string" || !ENTITY_NAME.test(value))
      throw new BrokerConfigError(
        `${p}.${key}`,
        `must be the name of a queue or topic of this namespace (got ${JSON.stringify(value)})`,
      );
    // Service Bus refuses the entity ("Sub code=40000. Bad request"; Azure/azure-service-bus#660,
    // MicrosoftDocs/azure-docs#61163): a session-enabled queue or subscription cannot forward.
    if (field === "forwardTo" && settings.requiresSession)
      throw new BrokerConfigError(
        `${p}.${key}`,
        `cannot be set with RequiresSession true: Service Bus does not auto-forward from a session-enabled entity (forward into a session queue from a subscription without sessions instead, docs/topics.md)`,
      );
    settings[field] = value;
  }
}

function parseQueue(raw: unknown, path: string): QueueSettings {
  if (!isObject(raw)) throw new BrokerConfigError(path, "must be an object");
  const name = raw["Name"];
  if (typeof name !== "string" || !ENTITY_NAME.test(name))
    throw new BrokerConfigError(`${path}.Name`, "must be a queue name (letters, digits, '.', '_', '-')");
  const props = raw["Properties"] ?? {};
  if (!isObject(props)) throw new BrokerConfigError(`${path}.Properties`, "must be an object");
  const p = `${path}.Properties`;
  const settings: QueueSettings = { name, ...queueDefaults };
  settings.lockDurationMs = duration(props, "LockDuration", p, settings.lockDurationMs);
  settings.maxDeliveryCount = integer(props, "MaxDeliveryCount", p, settings.maxDeliveryCount, 1);
  settings.requiresDuplicateDetection = boolean(
    props,
    "RequiresDuplicateDetection",
    p,
    FILE_DUPLICATE_DETECTION,
  );
  settings.duplicateDetectionWindowMs = duration(
    props,
    "DuplicateDetectionHistoryTimeWindow",
    p,
    settings.duplicateDetectionWindowMs,
  );
  settings.defaultTimeToLiveMs = duration(props, "DefaultMessageTimeToLive", p, settings.defaultTimeToLiveMs);
  settings.deadLetteringOnMessageExpiration = boolean(
    props,
    "DeadLetteringOnMessageExpiration",
    p,
    settings.deadLetteringOnMessageExpiration,
  );
  settings.maxMessageSizeBytes =
    integer(props, "MaxMessageSizeInKilobytes", p, settings.maxMessageSizeBytes / 1024, 1) * 1024;
  // Azure's largest MaxSizeInMegabytes is 81920 (80 GB, Premium); a larger value (a typo, 1e9) is one Azure refuses, so the local broker refuses it too.
  settings.maxSizeBytes =
    integer(props, "MaxSizeInMegabytes", p, settings.maxSizeBytes / (1024 * 1024), 1, MAX_SIZE_IN_MEGABYTES) *
    1024 *
    1024;
  settings.requiresSession = boolean(props, "RequiresSession", p, false);
  readForwarding(props, p, settings);
  return settings;
}

function duration(props: Json, key: string, path: string, fallback: number): number {
  const value = props[key];
  if (value === undefined) return fallback;
  const ms = typeof value === "string" ? parseIsoDuration(value) : undefined;
  if (ms === undefined || ms <= 0)
    throw new BrokerConfigError(
      `${path}.${key}`,
      `must be a positive ISO 8601 duration such as "PT1M" (got ${JSON.stringify(value)})`,
    );
  return ms;
}

const MAX_SIZE_IN_MEGABYTES = 81920;

function integer(
  props: Json,
  key: string,
  path: string,
  fallback: number,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const value = props[key];
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max)
    throw new BrokerConfigError(
      `${path}.${key}`,
      max === Number.MAX_SAFE_INTEGER
        ? `must be an integer >= ${min} (got ${JSON.stringify(value)})`
        : `must be an integer from ${min} to ${max} (got ${JSON.stringify(value)})`,
    );
  return value;
}

function boolean(props: Json, key: string, path: string, fallback: boolean): boolean {
  const value = props[key];
  if (value === undefined) return fallback;
  if (typeof value !== "boolean")
    throw new BrokerConfigError(`${path}.${key}`, `must be true or false (got ${JSON.stringify(value)})`);
  return value;
}
