/**
 * Service Bus's SQL filter language (a SQL-92 subset, learn.microsoft.com "Subscription Rule SQL Filter Syntax"),
 * parsed once at broker start-up and evaluated on each send. Hand-written: no maintained npm package parses this
 * dialect (its `sys.` / `user.` scopes, bracketed names, EXISTS, three-valued logic), and the grammar is small.
 * What it leaves out (functions such as newid() and property(), @parameters) is refused when parsed, with the
 * position named, rather than evaluated wrongly.
 */

export type Value = string | number | boolean | null;

/** What a filter can read of a message. A property that is absent reads as undefined (SQL's unknown). */
export interface FilterInput {
  system(name: SystemProperty): Value | undefined;
  user(name: string): Value | undefined;
}

export const SYSTEM_PROPERTIES = [
  "MessageId",
  "CorrelationId",
  "To",
  "ReplyTo",
  "Label",
  "Subject",
  "SessionId",
  "ReplyToSessionId",
  "ContentType",
] as const;
export type SystemProperty = (typeof SYSTEM_PROPERTIES)[number];

export class SqlFilterError extends Error {
  constructor(expression: string, position: number, problem: string) {
    super(`${problem} at position ${position + 1} of "${expression}"`);
    this.name = "SqlFilterError";
  }
}

type Expr =
  | { kind: "const"; value: Value; decimal?: true }
  | { kind: "prop"; scope: "sys" | "user"; name: string }
  | { kind: "unary"; op: "-" | "+" | "not"; arg: Expr }
  | { kind: "binary"; op: string; left: Expr; right: Expr }
  | { kind: "isNull"; arg: Expr; negated: boolean }
  | { kind: "in"; arg: Expr; list: Expr[]; negated: boolean }
  | { kind: "like"; arg: Expr; pattern: string; escape: string | undefined; negated: boolean }
  | { kind: "exists"; prop: Expr };

interface Token {
  kind: "word" | "name" | "string" | "number" | "op" | "end";
  text: string;
  pos: number;
}

const KEYWORDS = new Set([
  "AND",
  "OR",
  "NOT",
  "IS",
  "NULL",
  "IN",
  "LIKE",
  "ESCAPE",
  "EXISTS",
  "TRUE",
  "FALSE",
]);

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  const fail = (problem: string): never => {
    throw new SqlFilterError(source, i, problem);
  };
  while (i < source.length) {
    const c = source[i]!;
    if (/\s/.test(c)) {
      i += 1;
      continue;
    }
    const start = i;
    if (c === "'") {
      let text = "";
      i += 1;
      for (;;) {
        if (i >= source.length) fail("unterminated string");
        if (source[i] === "'") {
          if (source[i + 1] === "'") {
            text += "'";
            i += 2;
            continue;
          }
          i += 1;
          break;
        }
        text += source[i];
        i += 1;
      }
      tokens.push({ kind: "string", text, pos: start });
    } else if (c === "[") {
      const close = source.indexOf("]", i);
      if (close < 0) fail("unterminated [name]");
      tokens.push({ kind: "name", text: source.slice(i + 1, close), pos: start });
      i = close + 1;
    } else if (/[0-9]/.test(c) || (c === "." && /[0-9]/.test(source[i + 1] ?? ""))) {
      const match = /^[0-9]*\.?[0-9]*([eE][+-]?[0-9]+)?/.exec(source.slice(i))!;
      tokens.push({ kind: "number", text: match[0], pos: start });
      i += match[0].length;
    } else if (/[A-Za-z_]/.test(c)) {
      const match = /^[A-Za-z_][A-Za-z0-9_]*/.exec(source.slice(i))!;
      const upper = match[0].toUpperCase();
      tokens.push({
        kind: KEYWORDS.has(upper) ? "word" : "name",
        text: KEYWORDS.has(upper) ? upper : match[0],
        pos: start,
      });
      i += match[0].length;
    } else {
      const two = source.slice(i, i + 2);
      if (["<>", "!=", ">=", "<="].includes(two)) {
        tokens.push({ kind: "op", text: two, pos: start });
        i += 2;
      } else if ("=<>+-*/%(),.".includes(c)) {
        tokens.push({ kind: "op", text: c, pos: start });
        i += 1;
      } else if (c === "@") fail("parameters (@name) are not supported by the local broker");
      else fail(`unexpected character '${c}'`);
    }
  }
  tokens.push({ kind: "end", text: "", pos: source.length });
  return tokens;
}

class Parser {
  private readonly tokens: Token[];
  private index = 0;
  private readonly source: string;

  constructor(source: string) {
    this.source = source;
    this.tokens = tokenize(source);
  }

  parse(): Expr {
    const expr = this.or();
    if (this.peek().kind !== "end") this.fail(`unexpected '${this.peek().text}'`);
    return expr;
  }

  private peek(): Token {
    return this.tokens[this.index]!;
  }
  private next(): Token {
    return this.tokens[this.index++]!;
  }
  private isWord(word: string): boolean {
    const t = this.peek();
    return t.kind === "word" && t.text === word;
  }
  private isOp(op: string): boolean {
    const t = this.peek();
    return t.kind === "op" && t.text === op;
  }
  private expectOp(op: string): void {
    if (!this.isOp(op)) this.fail(`expected '${op}'`);
    this.index += 1;
  }
  private fail(problem: string): never {
    throw new SqlFilterError(this.source, this.peek().pos, problem);
  }

  private or(): Expr {
    let left = this.and();
    while (this.isWord("OR")) {
      this.index += 1;
      left = { kind: "binary", op: "or", left, right: this.and() };
    }
    return left;
  }
  private and(): Expr {
    let left = this.not();
    while (this.isWord("AND")) {
      this.index += 1;
      left = { kind: "binary", op: "and", left, right: this.not() };
    }
    return left;
  }
  private not(): Expr {
    if (this.isWord("NOT")) {
      this.index += 1;
      return { kind: "unary", op: "not", arg: this.not() };
    }
    return this.predicate();
  }

  private predicate(): Expr {
    if (this.isWord("EXISTS")) {
      this.index += 1;
      this.expectOp("(");
      const prop = this.primary();
      if (prop.kind !== "prop") this.fail("EXISTS takes a property");
      this.expectOp(")");
      return { kind: "exists", prop };
    }
    const left = this.additive();
    const t = this.peek();
    if (t.kind === "op" && ["=", "<>", "!=", ">", ">=", "<", "<="].includes(t.text)) {
      this.index += 1;
      return { kind: "binary", op: t.text === "!=" ? "<>" : t.text, left, right: this.additive() };
    }
    if (this.isWord("IS")) {
      this.index += 1;
      const negated = this.isWord("NOT");
      if (negated) this.index += 1;
      if (!this.isWord("NULL")) this.fail("expected NULL after IS");
      this.index += 1;
      return { kind: "isNull", arg: left, negated };
    }
    let negated = false;
    if (this.isWord("NOT")) {
      negated = true;
      this.index += 1;
      if (!this.isWord("IN") && !this.isWord("LIKE")) this.fail("expected IN or LIKE after NOT");
    }
    if (this.isWord("IN")) {
      this.index += 1;
      this.expectOp("(");
      const list = [this.additive()];
      while (this.isOp(",")) {
        this.index += 1;
        list.push(this.additive());
      }
      this.expectOp(")");
      return { kind: "in", arg: left, list, negated };
    }
    if (this.isWord("LIKE")) {
      this.index += 1;
      const pattern = this.next();
      if (pattern.kind !== "string") this.fail("LIKE takes a string pattern");
      let escape: string | undefined;
      if (this.isWord("ESCAPE")) {
        this.index += 1;
        const e = this.next();
        if (e.kind !== "string" || e.text.length !== 1) this.fail("ESCAPE takes one character in quotes");
        escape = e.text;
      }
      return { kind: "like", arg: left, pattern: pattern.text, escape, negated };
    }
    return left;
  }

  private additive(): Expr {
    let left = this.multiplicative();
    while (this.isOp("+") || this.isOp("-")) {
      const op = this.next().text;
      left = { kind: "binary", op, left, right: this.multiplicative() };
    }
    return left;
  }
  private multiplicative(): Expr {
    let left = this.unary();
    while (this.isOp("*") || this.isOp("/") || this.isOp("%")) {
      const op = this.next().text;
      left = { kind: "binary", op, left, right: this.unary() };
    }
    return left;
  }
  private unary(): Expr {
    if (this.isOp("-") || this.isOp("+")) {
      const op = this.next().text as "-" | "+";
      return { kind: "unary", op, arg: this.unary() };
    }
    return this.primary();
  }

  private primary(): Expr {
    const t = this.peek();
    if (t.kind === "op" && t.text === "(") {
      this.index += 1;
      const inner = this.or();
      this.expectOp(")");
      return inner;
    }
    if (t.kind === "string") {
      this.index += 1;
      return { kind: "const", value: t.text };
    }
    if (t.kind === "number") {
      this.index += 1;
      // A literal written with a point or an exponent is a double in Service Bus; one without is an integer, and
      // that decides whether `/` truncates (see binary()).
      return /[.eE]/.test(t.text)
        ? { kind: "const", value: Number(t.text), decimal: true }
        : { kind: "const", value: Number(t.text) };
    }
    if (t.kind === "word" && (t.text === "TRUE" || t.text === "FALSE")) {
      this.index += 1;
      return { kind: "const", value: t.text === "TRUE" };
    }
    if (t.kind === "word" && t.text === "NULL") {
      this.index += 1;
      return { kind: "const", value: null };
    }
    if (t.kind === "name") {
      this.index += 1;
      if (this.isOp("(")) this.fail(`functions (${t.text}()) are not supported by the local broker`);
      const lower = t.text.toLowerCase();
      if ((lower === "sys" || lower === "user") && this.isOp(".")) {
        this.index += 1;
        const name = this.next();
        if (name.kind !== "name" && name.kind !== "word") this.fail("expected a property name");
        if (lower === "user") return { kind: "prop", scope: "user", name: name.text };
        const sys = SYSTEM_PROPERTIES.find((p) => p.toLowerCase() === name.text.toLowerCase());
        if (!sys)
          throw new SqlFilterError(
            this.source,
            name.pos,
            `system property sys.${name.text} is not supported by the local broker (supported: ${SYSTEM_PROPERTIES.join(", ")})`,
          );
        return { kind: "prop", scope: "sys", name: sys };
      }
      return { kind: "prop", scope: "user", name: t.text };
    }
    return this.fail(t.kind === "end" ? "unexpected end of expression" : `unexpected '${t.text}'`);
  }
}

/** A parsed filter: `matches` is true only when the expression is TRUE (unknown does not match, as in SQL). */
export interface SqlFilter {
  readonly expression: string;
  matches(input: FilterInput): boolean;
}

export function parseSqlFilter(expression: string): SqlFilter {
  const tree = new Parser(expression).parse();
  return { expression, matches: (input) => truth(evaluate(tree, input)) === true };
}

type Result = Value | undefined;

/** Three-valued logic: true, false, or undefined for unknown. */
function truth(value: Result): boolean | undefined {
  return typeof value === "boolean" ? value : undefined;
}

function evaluate(expr: Expr, input: FilterInput): Result {
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
