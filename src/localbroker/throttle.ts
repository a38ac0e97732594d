import {
  BrokerConfigError,
  THROTTLE_KINDS,
  type ThrottleKind,
  type ThrottleRule,
  type ThrottleSettings,
} from "./entity-settings.ts";

type Json = Record<string, unknown>;

export { THROTTLE_KINDS, type ThrottleKind, type ThrottleRule, type ThrottleSettings };

/** The condition Service Bus answers a throttled operation with; @azure/service-bus reports it as `ServiceBusy`. */
export const SERVER_BUSY = "com.microsoft:server-busy";

/** Service Bus's text, as the throttling page gives it (the service names the namespace where this says entity). */
export const SERVER_BUSY_DESCRIPTION =
  "The request was terminated because the entity is being throttled. Error code : 50009. Please wait 2 seconds and try again.";

/** Which kind a `$management` operation counts as, and its credits (ten for rule management, as Standard). */
export function managementKind(operation: unknown): { kind: ThrottleKind; credits: number } {
  switch (operation) {
    case "com.microsoft:schedule-message":
    case "com.microsoft:cancel-scheduled-message":
      return { kind: "send", credits: 1 };
    case "com.microsoft:peek-message":
    case "com.microsoft:receive-by-sequence-number":
      return { kind: "receive", credits: 1 };
    case "com.microsoft:update-disposition":
      return { kind: "settle", credits: 1 };
    case "com.microsoft:add-rule":
    case "com.microsoft:remove-rule":
    case "com.microsoft:enumerate-rules":
      return { kind: "management", credits: 10 };
    default:
      return { kind: "management", credits: 1 };
  }
}

export interface ThrottleCounts {
  readonly admitted: number;
  readonly throttled: number;
}

interface KindState {
  rule: ThrottleRule;
  owed: number;
  windowStart: number;
  used: number;
  admitted: number;
  throttled: number;
}

/** Decides, operation by operation, which ones the broker answers with ServerBusy. */
export class Throttle {
  private readonly state = new Map<ThrottleKind, KindState>();
  private readonly now: () => number;

  constructor(settings: ThrottleSettings = {}, now: () => number = Date.now) {
    this.now = now;
    for (const kind of THROTTLE_KINDS)
      this.state.set(kind, { rule: {}, owed: 0, windowStart: 0, used: 0, admitted: 0, throttled: 0 });
    this.configure(settings);
  }

  /** Replaces the rules (kinds not named are no longer throttled); counts are kept. */
  configure(settings: ThrottleSettings): void {
    const checked = checkThrottleSettings(settings, "throttle");
    for (const kind of THROTTLE_KINDS) {
      const s = this.state.get(kind)!;
      s.rule = checked[kind] ?? {};
      s.owed = 0;
      s.used = 0;
      s.windowStart = 0;
    }
  }

  /** True when an operation of `kind` costing `credits` may go ahead; false when it is to be answered ServerBusy. */
  admit(kind: ThrottleKind, credits = 1): boolean {
    const s = this.state.get(kind)!;
    const { share, creditsPerSecond } = s.rule;
    let refuse = false;
    if (share !== undefined && share > 0) {
      s.owed += share;
      if (s.owed >= 1 - 1e-9) {
        s.owed -= 1;
        refuse = true;
      }
    }
    if (!refuse && creditsPerSecond !== undefined) {
      const now = this.now();
      if (now - s.windowStart >= 1000) {
        s.windowStart = now - (now % 1000);
        s.used = 0;
      }
      if (s.used + credits > creditsPerSecond) refuse = true;
      else s.used += credits;
    }
    if (refuse) s.throttled += 1;
    else s.admitted += 1;
    return !refuse;
  }

  counts(): Record<ThrottleKind, ThrottleCounts> {
    const out = {} as Record<ThrottleKind, ThrottleCounts>;
    for (const [kind, s] of this.state) out[kind] = { admitted: s.admitted, throttled: s.throttled };
    return out;
  }
}

/** Validates settings given in code (`LocalBroker.throttle`, `LocalBroker.start`), naming the bad field. */
export function checkThrottleSettings(settings: ThrottleSettings, path: string): ThrottleSettings {
  if (typeof settings !== "object" || settings === null)
    throw new BrokerConfigError(path, "must be an object of send, receive, settle, management");
  for (const key of Object.keys(settings))
    if (!(THROTTLE_KINDS as readonly string[]).includes(key))
      throw new BrokerConfigError(
        `${path}.${key}`,
        `is not an operation kind (${THROTTLE_KINDS.join(", ")})`,
      );
  for (const kind of THROTTLE_KINDS) {
    const rule = settings[kind];
    if (rule === undefined) continue;
    const { share, creditsPerSecond } = rule;
    if (share !== undefined && (typeof share !== "number" || !(share >= 0 && share <= 1)))
      throw new BrokerConfigError(
        `${path}.${kind}.share`,
        `must be a number from 0 to 1 (got ${String(share)})`,
      );
    if (
      creditsPerSecond !== undefined &&
      (typeof creditsPerSecond !== "number" || !Number.isInteger(creditsPerSecond) || creditsPerSecond < 0)
    )
      throw new BrokerConfigError(
        `${path}.${kind}.creditsPerSecond`,
        `must be a whole number >= 0 (got ${String(creditsPerSecond)})`,
      );
  }
  return settings;
}

const FILE_KINDS: Record<string, ThrottleKind> = {
  Send: "send",
  Receive: "receive",
  Settle: "settle",
  Management: "management",
};

/**
 * `UserConfig.Namespaces[0].Throttling` of a config file: `{ "Send": { "Share": 0.3 }, "Receive":
 * { "CreditsPerSecond": 100 }, ... }`. A local-broker extension of the emulator's shape.
 */
export function parseThrottling(raw: unknown, path: string): ThrottleSettings {
  if (raw === undefined) return {};
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw new BrokerConfigError(path, "must be an object of Send, Receive, Settle, Management");
  const settings: Record<string, ThrottleRule> = {};
  for (const [key, value] of Object.entries(raw as Json)) {
    const kind = FILE_KINDS[key];
    if (!kind)
      throw new BrokerConfigError(
        `${path}.${key}`,
        `is not an operation kind (${Object.keys(FILE_KINDS).join(", ")})`,
      );
    if (typeof value !== "object" || value === null || Array.isArray(value))
      throw new BrokerConfigError(`${path}.${key}`, "must be an object with Share or CreditsPerSecond");
    const rule = value as Json;
    for (const field of Object.keys(rule))
      if (field !== "Share" && field !== "CreditsPerSecond")
        throw new BrokerConfigError(
          `${path}.${key}.${field}`,
          "is not a throttling setting (Share, CreditsPerSecond)",
        );
    settings[kind] = {
      share: rule["Share"] as number | undefined,
      creditsPerSecond: rule["CreditsPerSecond"] as number | undefined,
    };
    const checked = settings[kind];
    try {
      checkThrottleSettings({ [kind]: checked }, path);
    } catch (error) {
      const field = (error as BrokerConfigError).field.endsWith("share") ? "Share" : "CreditsPerSecond";
      throw new BrokerConfigError(
        `${path}.${key}.${field}`,
        (error as Error).message.replace(/^.*? must/, "must"),
      );
    }
  }
  return settings;
}
