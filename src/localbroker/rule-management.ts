import type { ManagementResponse } from "./management-response.ts";
import type { Queue } from "./queue.ts";
import { amqp } from "./rhea.ts";
import { correlationRule, sqlRule, type Rule, type RuleFilter } from "./rules.ts";
import { SqlFilterError, type SystemProperty, type Value } from "./sql-filter.ts";

// A subscription's rules over AMQP (learn.microsoft.com, "AMQP 1.0 in Azure Service Bus: request-response-based
// operations", rule operations): com.microsoft:add-rule, remove-rule, enumerate-rules, the filters the broker
// evaluates (SQL, correlation, true), what the SDKs' rule managers send (createRuleManager / ServiceBusRuleManager).

type Body = Record<string, unknown>;

/**
 * The descriptors of Service Bus's rule types, as core-amqp's `descriptorCodes` and Microsoft.Azure.Amqp's codecs
 * have them (the filters' codes have one zero fewer than the rule description's).
 */
const DESCRIPTOR = {
  ruleDescription: 0x13700000004,
  emptyRuleAction: 0x13700000005,
  sqlFilter: 0x1370000006,
  trueFilter: 0x1370000007,
  correlationFilter: 0x1370000009,
} as const;

/** Service Bus's filter compatibility level, sent beside a SQL filter's expression. */
const COMPATIBILITY_LEVEL = 20;

/** A correlation filter's fields on the wire, in the order the described list carries them. */
const WIRE_FIELDS: readonly [string, SystemProperty][] = [
  ["correlation-id", "CorrelationId"],
  ["message-id", "MessageId"],
  ["to", "To"],
  ["reply-to", "ReplyTo"],
  ["label", "Label"],
  ["session-id", "SessionId"],
  ["reply-to-session-id", "ReplyToSessionId"],
  ["content-type", "ContentType"],
];

const RULE_NAME_MAX = 50;

function bad(condition: string, description: string, status = 400): ManagementResponse {
  return { status, condition, description };
}

function isBody(value: unknown): value is Body {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Answers a rule operation on a subscription, or undefined when `operation` is not one. */
export function ruleOperation(queue: Queue, operation: unknown, body: Body): ManagementResponse | undefined {
  if (
    operation !== "com.microsoft:add-rule" &&
    operation !== "com.microsoft:remove-rule" &&
    operation !== "com.microsoft:enumerate-rules"
  )
    return undefined;
  const rules = queue.rules;
  if (!rules)
    return bad(
      "amqp:not-allowed",
      `The operation ${operation} is allowed on a subscription only, not on '${queue.name}'.`,
    );
  if (operation === "com.microsoft:enumerate-rules") return enumerate(rules, body);
  const name = body["rule-name"];
  if (typeof name !== "string" || name === "" || name.length > RULE_NAME_MAX)
    return bad(
      "com.microsoft:argument-error",
      `rule-name must be a string of 1 to ${RULE_NAME_MAX} characters`,
    );
  const at = rules.findIndex((r) => r.name.toLowerCase() === name.toLowerCase());
  if (operation === "com.microsoft:remove-rule") {
    if (at < 0)
      return bad(
        "amqp:not-found",
        `The messaging entity '${queue.name}/Rules/${name}' could not be found.`,
        404,
      );
    rules.splice(at, 1);
    return { status: 200, body: {} };
  }
  if (at >= 0)
    return bad(
      "com.microsoft:entity-already-exists",
      `The messaging entity '${queue.name}/Rules/${name}' already exists.`,
      409,
    );
  const made = ruleFromDescription(name, body["rule-description"]);
  if ("status" in made) return made;
  rules.push(made);
  return { status: 200, body: {} };
}

/** A rule from add-rule's `rule-description` map: a SQL or correlation filter; actions are refused. */
function ruleFromDescription(name: string, raw: unknown): Rule | ManagementResponse {
  if (!isBody(raw)) return bad("com.microsoft:argument-error", "rule-description must be a map");
  const action = raw["sql-rule-action"];
  if (isBody(action) && typeof action["expression"] === "string" && action["expression"].trim() !== "")
    return bad(
      "amqp:not-implemented",
      `rule "${name}": rule actions (sql-rule-action) are not supported by the local broker (they change messages)`,
      501,
    );
  const sql = raw["sql-filter"];
  if (isBody(sql)) {
    const expression = sql["expression"];
    if (typeof expression !== "string" || expression.trim() === "")
      return bad("com.microsoft:argument-error", `rule "${name}": sql-filter needs an expression`);
    try {
      return sqlRule(name, expression);
    } catch (error) {
      if (error instanceof SqlFilterError)
        return bad("com.microsoft:argument-out-of-range", `rule "${name}": ${error.message}`);
      throw error;
    }
  }
  const correlation = raw["correlation-filter"];
  if (isBody(correlation)) {
    const system: Partial<Record<SystemProperty, string>> = {};
    for (const [wire, field] of WIRE_FIELDS) {
      const value = correlation[wire];
      if (typeof value === "string" && value !== "") system[field] = value;
    }
    const properties: Record<string, Value> = {};
    const given = correlation["properties"];
    if (isBody(given))
      for (const [key, value] of Object.entries(given)) {
        if (typeof value === "string" || typeof value === "number" || typeof value === "boolean")
          properties[key] = value;
        else
          return bad(
            "com.microsoft:argument-error",
            `rule "${name}": correlation property ${key} must be a string, number or boolean`,
          );
      }
    if (Object.keys(system).length === 0 && Object.keys(properties).length === 0)
      return bad(
        "com.microsoft:argument-error",
        `rule "${name}": a correlation filter must set at least one field`,
      );
    return correlationRule(name, system, properties);
  }
  return bad(
    "com.microsoft:argument-error",
    `rule "${name}": rule-description needs a sql-filter or a correlation-filter`,
  );
}

/** enumerate-rules: `skip` and `top` over the rules in the order they were added; 204 when none is left. */
function enumerate(rules: readonly Rule[], body: Body): ManagementResponse {
  const skip = typeof body["skip"] === "number" ? body["skip"] : 0;
  const top = typeof body["top"] === "number" ? body["top"] : rules.length;
  const page = rules.slice(skip, skip + top);
  if (page.length === 0) return { status: 204, description: "No rules" };
  return { status: 200, body: { rules: page.map((rule) => ({ "rule-description": describe(rule) })) } };
}

const t = amqp.types;

function describe(rule: Rule): unknown {
  return t.described(
    t.wrap_ulong(DESCRIPTOR.ruleDescription),
    t.wrap_list([
      describeFilter(rule.filter ?? { kind: "true" }),
      describeAction(),
      t.wrap_string(rule.name),
    ]),
  );
}

function describeAction(): unknown {
  return t.described(t.wrap_ulong(DESCRIPTOR.emptyRuleAction), t.wrap_list([]));
}

function describeFilter(filter: RuleFilter): unknown {
  switch (filter.kind) {
    case "true":
      return t.described(
        t.wrap_ulong(DESCRIPTOR.trueFilter),
        t.wrap_list([t.wrap_string("1=1"), t.wrap_int(COMPATIBILITY_LEVEL)]),
      );
    case "sql":
      return t.described(
        t.wrap_ulong(DESCRIPTOR.sqlFilter),
        t.wrap_list([t.wrap_string(filter.expression), t.wrap_int(COMPATIBILITY_LEVEL)]),
      );
    case "correlation": {
      const fields = WIRE_FIELDS.map(([, field]) => {
        const value = filter.system[field];
        return value === undefined ? t.Null() : t.wrap_string(value);
      });
      return t.described(
        t.wrap_ulong(DESCRIPTOR.correlationFilter),
        t.wrap_list([...fields, t.wrap_map(filter.properties)]),
      );
    }
  }
}
