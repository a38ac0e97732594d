/**
 * Service Bus's SQL filter language (a SQL-92 subset, learn.microsoft.com "Subscription Rule SQL Filter Syntax"),
 * parsed once at broker start-up and evaluated on each send. Hand-written: no maintained npm package parses this
 * dialect (its `sys.` / `user.` scopes, bracketed names, EXISTS, three-valued logic), and the grammar is small.
 * What it leaves out (functions such as newid() and property(), @parameters) is refused when parsed, with the
 * position named, rather than evaluated wrongly.
 */

import { evaluate, truth } from "./sql-filter-evaluate.ts";
import { Parser, type FilterInput } from "./sql-filter-parse.ts";

export {
  SqlFilterError,
  SYSTEM_PROPERTIES,
  type FilterInput,
  type SystemProperty,
  type Value,
} from "./sql-filter-parse.ts";

/** A parsed filter: `matches` is true only when the expression is TRUE (unknown does not match, as in SQL). */
export interface SqlFilter {
  readonly expression: string;
  matches(input: FilterInput): boolean;
}

export function parseSqlFilter(expression: string): SqlFilter {
  const tree = new Parser(expression).parse();
  return { expression, matches: (input) => truth(evaluate(tree, input)) === true };
}
