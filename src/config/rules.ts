import { ConfigError } from "../domain/errors.ts";

// The rules both readers of the settings apply (publish.ts without zod, schema.ts with it), below both so that
// neither imports the other.

export const serviceBusRules = {
  connectionString: {
    test: (v: string) => connectionStringGap(v) === undefined,
    /** What the string lacks, as the message of its error; undefined when nothing is missing. */
    gap: (v: string) => connectionStringGap(v),
    message: "must contain Endpoint=sb://...",
  },
  namespace: {
    test: (v: string) => /^[a-z0-9.-]+$/i.test(v) && v.includes("."),
    message: "must be a fully qualified host name",
  },
  queue: { max: 260, message: "must be at most 260 characters" },
  topic: {
    max: 260,
    maxMessage: "must be at most 260 characters (Service Bus's limit)",
    pattern: /^[A-Za-z0-9][A-Za-z0-9._/-]*$/,
    message: "must be a topic name (letters, digits, '.', '_', '-', '/')",
  },
  subscription: {
    max: 50,
    maxMessage: "must be at most 50 characters (Service Bus's limit)",
    pattern: /^[A-Za-z0-9][A-Za-z0-9._-]*$/,
    message: "must be a subscription name (letters, digits, '.', '_', '-')",
  },
} as const;

/**
 * The SDK's own check of a connection string happens only when the client is built, as a TypeError with a stack
 * ("Missing 'sharedAccessKeyName' in configuration"); the same parts are checked here, so a bad setting is a
 * configuration error naming it. A SharedAccessSignature stands in for the key name and key, as in the SDK.
 */
function connectionStringGap(v: string): string | undefined {
  const parts = new Map<string, string>();
  for (const part of v.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0) parts.set(part.slice(0, eq).trim().toLowerCase(), part.slice(eq + 1).trim());
  }
  if (!/^sb:\/\/./i.test(parts.get("endpoint") ?? "")) return "must contain Endpoint=sb://...";
  if (parts.get("sharedaccesssignature")) return undefined;
  for (const name of ["SharedAccessKeyName", "SharedAccessKey"]) {
    if (!parts.get(name.toLowerCase())) {
      return `has no ${name}=... (a Shared Access key's name and key, or a SharedAccessSignature=..., are needed; the local broker and the emulator accept any)`;
    }
  }
  return undefined;
}

/**
 * The conflicts between SBINBOX_QUEUE and SBINBOX_TOPIC, and SBINBOX_SUBSCRIPTION refused, for both readers of the
 * settings.
 */
export function checkEntityConflicts(
  queue: string | undefined,
  topic: string | undefined,
  subscription: string | undefined,
): void {
  if (queue !== undefined && topic !== undefined)
    throw new ConfigError("SBINBOX_TOPIC", "set either it or SBINBOX_QUEUE, not both");
  if (subscription !== undefined) throw new ConfigError("SBINBOX_SUBSCRIPTION", SUBSCRIPTION_REMOVED);
}

/** Receiving from a subscription was replaced by forwarding (docs/topics.md, "Moving to forwarding"). */
export const SUBSCRIPTION_REMOVED =
  "is no longer read: a worker on a topic receives from its service's own queue, which its subscription forwards to (ForwardTo); set SBINBOX_QUEUE to that queue (docs/topics.md, Moving to forwarding)";
