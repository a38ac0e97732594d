import { ConfigError } from "../domain/errors.ts";
import type { ServiceBusConnection } from "./load.ts";
import { checkEntityConflicts, serviceBusRules } from "./rules.ts";

/**
 * The settings `sbinbox publish` reads, checked without zod. Loading zod and the full schema cost about 100 ms of a
 * publish's start-up (more than a third of the SDK's own), for three settings. The rules are rules.ts's, which
 * schema.ts applies to the same settings (its parsers call these predicates), and test/unit/config-publish.test.ts
 * checks both readers give the same values and errors. With SBINBOX_CONFIG_FILE the full loader reads the file, so a file
 * shared with the worker is checked as a whole, as before.
 */
export interface PublishConfig {
  readonly serviceBus: Exclude<ServiceBusConnection, { kind: "embedded" }>;
  /** The entity sent to: SBINBOX_QUEUE, or SBINBOX_TOPIC (every matching subscription gets its copy). */
  readonly queue: string;
}

const DEFAULT_QUEUE = "sbinbox";

export async function loadPublishConfig(env: NodeJS.ProcessEnv = process.env): Promise<PublishConfig> {
  if (env.SBINBOX_CONFIG_FILE !== undefined && env.SBINBOX_CONFIG_FILE.trim() !== "") {
    const { loadConfig } = await import("./load.ts");
    const config = loadConfig({ env, purpose: "publish" });
    return { serviceBus: config.serviceBus as PublishConfig["serviceBus"], queue: config.queue };
  }
  // An empty variable means "not set", as in the full loader.
  const read = (name: string): string | undefined => {
    const value = env[name]?.trim();
    return value === undefined || value === "" ? undefined : value;
  };
  const check = (name: string, ok: boolean, message: string): void => {
    if (!ok) throw new ConfigError(name, `${message} (got ${JSON.stringify(env[name])})`);
  };
  const cs = read("SBINBOX_SERVICEBUS_CONNECTION_STRING");
  const topic = read("SBINBOX_TOPIC");
  // The Bicep deployment's outputs (docs/deploy.md), under their own names, stand in for unset SBINBOX_ settings,
  // so a shell that has the outputs publishes to the deployed queue as it is.
  const nsName =
    cs === undefined && read("SBINBOX_SERVICEBUS_NAMESPACE") === undefined && read("SERVICEBUS_NAMESPACE")
      ? "SERVICEBUS_NAMESPACE"
      : "SBINBOX_SERVICEBUS_NAMESPACE";
  const ns = read(nsName);
  const queueName =
    read("SBINBOX_QUEUE") === undefined && topic === undefined && read("SERVICEBUS_QUEUE")
      ? "SERVICEBUS_QUEUE"
      : "SBINBOX_QUEUE";
  const queueSetting = read(queueName);
  const subscription = read("SBINBOX_SUBSCRIPTION");
  const queue = queueSetting ?? DEFAULT_QUEUE;
  if (cs !== undefined) {
    const gap = serviceBusRules.connectionString.gap(cs);
    check("SBINBOX_SERVICEBUS_CONNECTION_STRING", gap === undefined, gap ?? "");
  }
  if (ns !== undefined) {
    check(nsName, serviceBusRules.namespace.test(ns), serviceBusRules.namespace.message);
  }
  check(queueName, queue.length <= serviceBusRules.queue.max, serviceBusRules.queue.message);
  for (const [name, value, rule] of [
    ["SBINBOX_TOPIC", topic, serviceBusRules.topic],
    ["SBINBOX_SUBSCRIPTION", subscription, serviceBusRules.subscription],
  ] as const) {
    if (value === undefined) continue;
    check(name, value.length <= rule.max, rule.maxMessage);
    check(name, rule.pattern.test(value), rule.message);
  }
  if (cs === undefined && ns === undefined) {
    throw new ConfigError(
      "SBINBOX_SERVICEBUS_CONNECTION_STRING",
      "required to publish (or SBINBOX_SERVICEBUS_NAMESPACE, or the deployment's output SERVICEBUS_NAMESPACE); a worker on embedded defaults logs the one to use",
    );
  }
  if (cs !== undefined && ns !== undefined) {
    throw new ConfigError(
      "SBINBOX_SERVICEBUS_NAMESPACE",
      "set either it or SBINBOX_SERVICEBUS_CONNECTION_STRING, not both",
    );
  }
  checkEntityConflicts(read("SBINBOX_QUEUE"), topic, subscription);
  return {
    serviceBus:
      cs !== undefined
        ? { kind: "connection-string", connectionString: cs }
        : { kind: "namespace", fullyQualifiedNamespace: ns! },
    queue: topic ?? queue,
  };
}
