// The filter language's syntax: its values, tokens and parse tree (sql-filter.ts says why it is hand-written).

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

export type Expr =
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

export class Parser {
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
