import { CORRELATION_FIELDS, correlationRule, sqlRule, type Rule } from "./rules.ts";
import { SqlFilterError, type SystemProperty, type Value } from "./sql-filter.ts";
import { BrokerConfigError } from "./entity-settings.ts";

// A subscription's rules as config.ts reads them from the emulator's Config.json (Rules[]), and the JSON object check
// both use.

export type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * A rule name ARM accepts: letters, digits, '.', '-', '_', starting and ending with a letter or digit, at most 50.
 * `$Default` is the name Service Bus gives the true filter it creates itself; ARM refuses to create a rule so named.
 */
const ARM_RULE_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,48}[A-Za-z0-9])?$/;

export function parseRule(raw: unknown, path: string, warnings: string[]): Rule {
  if (!isObject(raw)) throw new BrokerConfigError(path, "must be an object");
  const name = raw["Name"];
  if (typeof name !== "string" || name === "" || name.length > 50)
    throw new BrokerConfigError(`${path}.Name`, "must be a rule name of 1 to 50 characters");
  // A warning, not a refusal: whether the official emulator refuses such a name is not documented, and refusing a
  // file the emulator takes would break the drop-in use of its Config.json. Azure (ARM, Bicep) refuses it.
  if (!ARM_RULE_NAME.test(name))
    warnings.push(
      `${path}.Name "${name}" is not a rule name Azure accepts (letters, digits, '.', '-', '_', starting and ending with a letter or digit): a deployment with it would fail`,
    );
  const props = raw["Properties"];
  if (!isObject(props)) throw new BrokerConfigError(`${path}.Properties`, "must be an object");
  const p = `${path}.Properties`;
  const action = props["Action"];
  if (action !== undefined && action !== null) {
    const expression = isObject(action) ? action["SqlExpression"] : action;
    if (expression !== undefined && expression !== null && expression !== "")
      throw new BrokerConfigError(
        `${p}.Action`,
        `of rule "${name}" is not supported by the local broker (rule actions change messages); remove it`,
      );
  }
  const rawType = props["FilterType"];
  const filterType = typeof rawType === "string" ? rawType.toLowerCase() : "";
  if (filterType === "correlation" || filterType === "correlationfilter") {
    const filter = props["CorrelationFilter"];
    if (!isObject(filter)) throw new BrokerConfigError(`${p}.CorrelationFilter`, "must be an object");
    const system: Partial<Record<SystemProperty, string>> = {};
    let properties: Record<string, Value> = {};
    for (const [key, value] of Object.entries(filter)) {
      if (key === "Properties") {
        if (!isObject(value))
          throw new BrokerConfigError(`${p}.CorrelationFilter.Properties`, "must be an object");
        for (const [prop, v] of Object.entries(value))
          if (!["string", "number", "boolean"].includes(typeof v))
            throw new BrokerConfigError(
              `${p}.CorrelationFilter.Properties.${prop}`,
              "must be a string, number or boolean",
            );
        properties = value as Record<string, Value>;
        continue;
      }
      if (key === "RequiresPreprocessing") continue;
      const field = CORRELATION_FIELDS[key];
      if (!field)
        throw new BrokerConfigError(
          `${p}.CorrelationFilter.${key}`,
          `is not a correlation filter field (${Object.keys(CORRELATION_FIELDS).join(", ")}, Properties)`,
        );
      if (value === undefined || value === null || value === "") continue;
      if (typeof value !== "string")
        throw new BrokerConfigError(`${p}.CorrelationFilter.${key}`, "must be a string");
      system[field] = value;
    }
    if (Object.keys(system).length === 0 && Object.keys(properties).length === 0)
      throw new BrokerConfigError(`${p}.CorrelationFilter`, `of rule "${name}" must set at least one field`);
    return correlationRule(name, system, properties);
  }
  if (filterType === "sql" || filterType === "sqlfilter") {
    const filter = props["SqlFilter"];
    const expression = isObject(filter) ? filter["SqlExpression"] : undefined;
    if (typeof expression !== "string" || expression.trim() === "")
      throw new BrokerConfigError(`${p}.SqlFilter.SqlExpression`, "must be a non-empty string");
    try {
      return sqlRule(name, expression);
    } catch (error) {
      if (error instanceof SqlFilterError)
        throw new BrokerConfigError(`${p}.SqlFilter.SqlExpression`, `of rule "${name}": ${error.message}`);
      throw error;
    }
  }
  throw new BrokerConfigError(
    `${p}.FilterType`,
    `of rule "${name}" must be "Correlation" or "Sql" (got ${JSON.stringify(props["FilterType"])})`,
  );
}
