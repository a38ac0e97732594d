import { amqp } from "./rhea.ts";
import type { MessageParts } from "./codec.ts";
import { parseSqlFilter, type FilterInput, type SystemProperty, type Value } from "./sql-filter.ts";

/** What a rule's filter is, as enumerate-rules describes it back to a client. */
export type RuleFilter =
  | { readonly kind: "true" }
  | { readonly kind: "sql"; readonly expression: string }
  | {
      readonly kind: "correlation";
      readonly system: Partial<Record<SystemProperty, string>>;
      readonly properties: Record<string, Value>;
    };

/** A subscription's rule as the broker evaluates it on each send to the topic. */
export interface Rule {
  readonly name: string;
  /** Absent on a rule built in code without one; enumerate-rules then describes it as a true filter. */
  readonly filter?: RuleFilter;
  matches(input: FilterInput): boolean;
}

/** The correlation filter's fields, by their Config.json names; each one given must equal the message's. */
export const CORRELATION_FIELDS: Record<string, SystemProperty> = {
  CorrelationId: "CorrelationId",
  MessageId: "MessageId",
  To: "To",
  ReplyTo: "ReplyTo",
  Label: "Label",
  Subject: "Label",
  SessionId: "SessionId",
  ReplyToSessionId: "ReplyToSessionId",
  ContentType: "ContentType",
};

/** The rule every subscription starts with on Service Bus: $Default, a true filter. */
export const DEFAULT_RULE: Rule = { name: "$Default", filter: { kind: "true" }, matches: () => true };

export function correlationRule(
  name: string,
  system: Partial<Record<SystemProperty, string>>,
  properties: Record<string, Value>,
): Rule {
  const systemEntries = Object.entries(system) as [SystemProperty, string][];
  const propertyEntries = Object.entries(properties);
  return {
    name,
    filter: { kind: "correlation", system, properties },
    matches: (input) =>
      systemEntries.every(([key, value]) => input.system(key) === value) &&
      propertyEntries.every(([key, value]) => input.user(key) === value),
  };
}

/** A SQL rule; a bad expression throws SqlFilterError (the config loader names the rule). */
export function sqlRule(name: string, expression: string): Rule {
  const filter = parseSqlFilter(expression);
  return { name, filter: { kind: "sql", expression }, matches: (input) => filter.matches(input) };
}

/** What filters read of a stored message: its AMQP properties and its application properties, decoded once. */
export function filterInput(parts: MessageParts): FilterInput {
  const head = parts.head;
  let user: Record<string, unknown> | undefined;
  const system: Record<SystemProperty, unknown> = {
    MessageId: head.message_id,
    CorrelationId: head.correlation_id,
    To: head.to,
    ReplyTo: head.reply_to,
    Label: head.subject,
    Subject: head.subject,
    SessionId: head.group_id,
    ReplyToSessionId: head.reply_to_group_id,
    ContentType: head.content_type,
  };
  return {
    system: (name) => scalar(system[name]),
    user: (name) => {
      if (user === undefined) {
        try {
          user = parts.tail.length > 0 ? (amqp.message.decode(parts.tail).application_properties ?? {}) : {};
        } catch {
          user = {};
        }
      }
      return Object.prototype.hasOwnProperty.call(user, name) ? scalar(user[name]) : undefined;
    },
  };
}

/** Values as filters compare them: strings, numbers (longs included), booleans; others are unknown. */
function scalar(value: unknown): Value | undefined {
  if (value === undefined) return undefined;
  if (value === null) return null;
  if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") return value;
  if (typeof value === "bigint") return Number(value);
  if (Buffer.isBuffer(value) && value.length === 8) return Number(value.readBigInt64BE(0));
  if (value instanceof Date) return value.getTime();
  return undefined;
}
