import { readFile } from "node:fs/promises";
import { parseIsoDuration } from "./duration.ts";

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
}

export interface BrokerConfig {
  namespace: string;
  queues: QueueSettings[];
  /** Parts of the file that were read but are not served (topics); the CLI prints them. */
  warnings: string[];
}

export const DEFAULT_QUEUE_NAME = "sbinbox";

/** Defaults follow a Standard-tier queue, except duplicate detection, which sbinbox relies on. */
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
};

export function defaultConfig(): BrokerConfig {
  return {
    namespace: "sbinbox-local",
    queues: [{ name: DEFAULT_QUEUE_NAME, ...queueDefaults }],
    warnings: [],
  };
}

/** A config error names the JSON path of the bad setting. */
export class BrokerConfigError extends Error {
  readonly field: string;
  constructor(field: string, problem: string) {
    super(`invalid broker config: ${field} ${problem}`);
    this.name = "BrokerConfigError";
    this.field = field;
  }
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

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Reads the official Service Bus emulator's Config.json shape: UserConfig.Namespaces[].Queues[].Properties.
 * One namespace, as the emulator. Topics are not served: they are reported as warnings rather than refused, so
 * the emulator's own sample file (which declares a topic) still starts the queues it declares.
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
  const topics = ns["Topics"];
  if (topics !== undefined && !Array.isArray(topics))
    throw new BrokerConfigError(`${nsPath}.Topics`, "must be an array");
  const warnings = (topics ?? []).map(
    (t: unknown, i) =>
      `${nsPath}.Topics[${i}] (${isObject(t) ? String(t["Name"]) : "?"}) ignored: the local broker serves queues only`,
  );
  const rawQueues = ns["Queues"];
  if (!Array.isArray(rawQueues) || rawQueues.length === 0)
    throw new BrokerConfigError(`${nsPath}.Queues`, "must be a non-empty array");
  const queues = rawQueues.map((q: unknown, i) => parseQueue(q, `${nsPath}.Queues[${i}]`));
  const seen = new Set<string>();
  queues.forEach((q, i) => {
    const key = q.name.toLowerCase();
    if (seen.has(key))
      throw new BrokerConfigError(`${nsPath}.Queues[${i}].Name`, `"${q.name}" is declared twice`);
    seen.add(key);
  });
  return { namespace: name, queues, warnings };
}

function parseQueue(raw: unknown, path: string): QueueSettings {
  if (!isObject(raw)) throw new BrokerConfigError(path, "must be an object");
  const name = raw["Name"];
  if (typeof name !== "string" || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,259}$/.test(name))
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
    settings.requiresDuplicateDetection,
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
  if (boolean(props, "RequiresSession", p, false))
    throw new BrokerConfigError(
      `${p}.RequiresSession`,
      "is not supported by the local broker (sessions); set it to false",
    );
  for (const forward of ["ForwardTo", "ForwardDeadLetteredMessagesTo"]) {
    const value = props[forward];
    if (value !== undefined && value !== "" && value !== null)
      throw new BrokerConfigError(`${p}.${forward}`, "is not supported by the local broker; leave it empty");
  }
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
