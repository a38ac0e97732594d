import type { Expr, FilterInput, SystemProperty, Value } from "./sql-filter-parse.ts";

// A parse tree evaluated against one message, in SQL's three-valued logic.

type Result = Value | undefined;

/** Three-valued logic: true, false, or undefined for unknown. */
export function truth(value: Result): boolean | undefined {
  return typeof value === "boolean" ? value : undefined;
}

export function evaluate(expr: Expr, input: FilterInput): Result {
  switch (expr.kind) {
    case "const":
      return expr.value;
    case "prop": {
      const value = expr.scope === "sys" ? input.system(expr.name as SystemProperty) : input.user(expr.name);
      return value === null ? undefined : value;
    }
    case "exists":
      return (
        expr.prop.kind === "prop" &&
        (expr.prop.scope === "sys"
          ? input.system(expr.prop.name as SystemProperty)
          : input.user(expr.prop.name)) !== undefined
      );
    case "isNull": {
      const value = evaluate(expr.arg, input);
      const isNull = value === undefined || value === null;
      return expr.negated ? !isNull : isNull;
    }
    case "unary": {
      const value = evaluate(expr.arg, input);
      if (expr.op === "not") {
        const t = truth(value);
        return t === undefined ? undefined : !t;
      }
      if (typeof value !== "number") return undefined;
      return expr.op === "-" ? -value : value;
    }
    case "in": {
      const value = evaluate(expr.arg, input);
      if (value === undefined || value === null) return undefined;
      const found = expr.list.some((item) => equal(value, evaluate(item, input)) === true);
      return expr.negated ? !found : found;
    }
    case "like": {
      const value = evaluate(expr.arg, input);
      if (typeof value !== "string") return undefined;
      const found = likeRegExp(expr.pattern, expr.escape).test(value);
      return expr.negated ? !found : found;
    }
    case "binary":
      return binary(expr.op, expr.left, expr.right, input);
  }
}

function binary(op: string, leftExpr: Expr, rightExpr: Expr, input: FilterInput): Result {
  if (op === "and" || op === "or") {
    const l = truth(evaluate(leftExpr, input));
    const r = truth(evaluate(rightExpr, input));
    if (op === "and") return l === false || r === false ? false : l === true && r === true ? true : undefined;
    return l === true || r === true ? true : l === false && r === false ? false : undefined;
  }
  const left = evaluate(leftExpr, input);
  const right = evaluate(rightExpr, input);
  if (left === undefined || right === undefined || left === null || right === null) return undefined;
  switch (op) {
    case "=":
      return equal(left, right);
    case "<>": {
      const e = equal(left, right);
      return e === undefined ? undefined : !e;
    }
    case "<":
    case "<=":
    case ">":
    case ">=": {
      if (typeof left !== typeof right || typeof left === "boolean") return undefined;
      const l = left;
      const r = right as string | number;
      return op === "<" ? l < r : op === "<=" ? l <= r : op === ">" ? l > r : l >= r;
    }
    default: {
      if (op === "+" && typeof left === "string" && typeof right === "string") return left + right;
      if (typeof left !== "number" || typeof right !== "number") return undefined;
      if ((op === "/" || op === "%") && right === 0) return undefined;
      // Service Bus follows C#'s implicit conversions: integer / integer truncates (10 / 4 = 2). JavaScript has one
      // number type, so an integral value counts as an integer unless it is a literal written as a decimal; the
      // SDKs send an integral JavaScript number as an int or long, so a property rarely differs.
      if (
        op === "/" &&
        Number.isInteger(left) &&
        Number.isInteger(right) &&
        !decimal(leftExpr) &&
        !decimal(rightExpr)
      )
        return Math.trunc(left / right);
      return op === "+"
        ? left + right
        : op === "-"
          ? left - right
          : op === "*"
            ? left * right
            : op === "/"
              ? left / right
              : left % right;
    }
  }
}

function decimal(expr: Expr): boolean {
  return expr.kind === "const" && expr.decimal === true;
}

/** Values of different types are not equal and not unequal: unknown, so neither `=` nor `<>` matches. */
function equal(left: Result, right: Result): boolean | undefined {
  if (left === undefined || right === undefined || left === null || right === null) return undefined;
  if (typeof left !== typeof right) return undefined;
  return left === right;
}

function likeRegExp(pattern: string, escape: string | undefined): RegExp {
  let source = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (escape !== undefined && c === escape && i + 1 < pattern.length) {
      source += regExpEscape(pattern[i + 1]!);
      i += 1;
    } else if (c === "%") source += "[\\s\\S]*";
    else if (c === "_") source += "[\\s\\S]";
    else source += regExpEscape(c);
  }
  return new RegExp(`^${source}$`);
}

function regExpEscape(c: string): string {
  return c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}
