import type { Dialect } from "../domain/sql.ts";

/**
 * What a handler may not send through its transaction handle: statements that end or restart the inbox's
 * transaction (the marker would commit without the work, or the work run outside any transaction), and
 * session-level settings that would outlive the message on a pooled connection. Savepoints stay allowed for a
 * handler that runs alone in its transaction (`rules` "handler"), and are refused where they would reach past its
 * own writes: "alongside", a handler running beside others on one transaction (its ROLLBACK TO would undo their
 * interleaved writes too), and "statements", a statements handler's statements, sent together in one request
 * (where a statement's failure recovered by a savepoint would still be reported, and its DECLARE would be made
 * again by the next message's statements of one batch).
 *
 * A small tokenizer rather than a SQL parser: the only parsers for these dialects in Node are large native or
 * grammar packages, and the question here is narrow (the leading words of each statement, outside comments,
 * strings and quoted names). What it cannot see (dynamic SQL, a procedure that commits) is listed in docs/inbox.md.
 */
export function refusedStatement(
  sql: string,
  dialect: Dialect,
  rules: GuardRules = "handler",
): string | undefined {
  // Handlers send the same few statement texts again and again: each is read once.
  const cache = verdicts[rules][dialect];
  const known = cache.get(sql);
  if (known !== undefined) return known === ALLOWED ? undefined : known;
  const words = tokens(sql, dialect);
  const verdict = dialect === "postgres" ? refusedPostgres(words, rules) : refusedSqlServer(words, rules);
  if (cache.size >= CACHE_LIMIT) cache.clear();
  if (sql.length <= CACHEABLE_LENGTH) cache.set(sql, verdict ?? ALLOWED);
  return verdict;
}

const ALLOWED = "";
const CACHE_LIMIT = 1_000;
const CACHEABLE_LENGTH = 4_096;
/** What else is refused beside transaction control and session state (see refusedStatement). */
export type GuardRules = "handler" | "alongside" | "statements";

const verdicts: Record<GuardRules, Record<Dialect, Map<string, string>>> = {
  handler: { postgres: new Map(), sqlserver: new Map() },
  alongside: { postgres: new Map(), sqlserver: new Map() },
  statements: { postgres: new Map(), sqlserver: new Map() },
};

/**
 * Words upper-cased, `;` and operators as their own tokens; comments, strings and quoted names are dropped (each
 * string or quoted name leaves a `'`). Also what placeholders.ts reads parameter references from.
 */
export function tokens(sql: string, dialect: Dialect): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    const next = sql[i + 1];
    if (/\s/.test(c)) i += 1;
    else if (c === "-" && next === "-") i = indexAfter(sql, "\n", i);
    else if (c === "/" && next === "*") i = blockCommentEnd(sql, i, dialect);
    else if (c === "'") i = quotedEnd(sql, i, "'");
    else if (dialect === "postgres" && (c === "E" || c === "e") && next === "'") {
      // An escape string constant (E'...'): a backslash escapes the next character, `\'` included. Reached only
      // at the start of a word, so the E is a prefix, never a name's last letter.
      out.push("'");
      i = escapeStringEnd(sql, i + 1);
      continue;
    } else if (c === '"') i = quotedEnd(sql, i, '"');
    else if (c === "[" && dialect === "sqlserver") i = quotedEnd(sql, i, "]");
    else if (c === "$" && dialect === "postgres" && matchAt(DOLLAR_TAG, sql, i)) {
      const tag = matchAt(DOLLAR_TAG, sql, i)!;
      out.push("'"); // a dollar-quoted string is a value, like a quoted one
      i = indexAfter(sql, tag, i + tag.length);
      continue;
    } else {
      const word = matchAt(WORD, sql, i);
      if (word) {
        out.push(word.toUpperCase());
        i += word.length;
      } else {
        out.push(c);
        i += 1;
      }
      continue;
    }
    if (c === "'" || c === '"' || c === "[") out.push("'");
  }
  return out;
}

const DOLLAR_TAG = /\$\w*\$/y;
const WORD = /[@#\w$]+/y;

/** The match of a sticky pattern at `at`, without copying the rest of the text. */
function matchAt(pattern: RegExp, sql: string, at: number): string | undefined {
  pattern.lastIndex = at;
  return pattern.exec(sql)?.[0];
}

function indexAfter(sql: string, end: string, from: number): number {
  const at = sql.indexOf(end, from);
  return at === -1 ? sql.length : at + end.length;
}

function quotedEnd(sql: string, start: number, close: string): number {
  let i = start + 1;
  while (i < sql.length) {
    if (sql[i] === close) {
      if (sql[i + 1] === close)
        i += 2; // a doubled quote is an escaped one
      else return i + 1;
    } else i += 1;
  }
  return sql.length;
}

/** The end of an E'...' string whose opening quote is at `start`: `\x` and `''` are both escapes. */
function escapeStringEnd(sql: string, start: number): number {
  let i = start + 1;
  while (i < sql.length) {
    if (sql[i] === "\\") i += 2;
    else if (sql[i] === "'") {
      if (sql[i + 1] === "'") i += 2;
      else return i + 1;
    } else i += 1;
  }
  return sql.length;
}

/** Block comments nest on both servers. */
function blockCommentEnd(sql: string, start: number, _dialect: Dialect): number {
  let depth = 0;
  let i = start;
  while (i < sql.length) {
    if (sql[i] === "/" && sql[i + 1] === "*") {
      depth += 1;
      i += 2;
    } else if (sql[i] === "*" && sql[i + 1] === "/") {
      depth -= 1;
      i += 2;
      if (depth === 0) return i;
    } else i += 1;
  }
  return sql.length;
}

/** PostgreSQL: statements are separated by `;`; each one's leading words decide. */
function refusedPostgres(words: string[], rules: GuardRules): string | undefined {
  let start = true;
  for (let i = 0; i < words.length; i += 1) {
    const w = words[i]!;
    if (w === ";") {
      start = true;
      continue;
    }
    if (!start) continue;
    start = false;
    const second = words[i + 1];
    switch (w) {
      case "BEGIN":
      case "START":
      case "COMMIT":
      case "END":
      case "ABORT":
      case "RESET":
      case "DISCARD":
      case "LISTEN":
      case "UNLISTEN":
        return w;
      case "ROLLBACK":
        // ROLLBACK TO [SAVEPOINT] name undoes part of the transaction and keeps it open.
        if (second !== "TO") return w;
        if (rules !== "handler") return "ROLLBACK TO";
        break;
      case "SAVEPOINT":
      case "RELEASE":
        if (rules !== "handler") return w;
        break;
      case "DECLARE":
        if (rules === "statements") return w;
        break;
      case "PREPARE":
        if (second === "TRANSACTION") return "PREPARE TRANSACTION";
        break;
      case "SET":
        // SET LOCAL, SET CONSTRAINTS and SET TRANSACTION end with the transaction; anything else is the session's.
        if (second !== "LOCAL" && second !== "CONSTRAINTS" && second !== "TRANSACTION") return "SET";
        break;
    }
  }
  return undefined;
}

/**
 * T-SQL needs no `;` between statements, so every position counts; UPDATE's `SET col =` is told apart. USE is a
 * statement only outside parentheses: inside, it is a query hint (`OPTION (USE HINT (...))`, `USE PLAN`), and
 * no statement starts within parentheses.
 */
function refusedSqlServer(words: string[], rules: GuardRules): string | undefined {
  let depth = 0;
  for (let i = 0; i < words.length; i += 1) {
    const w = words[i]!;
    const second = words[i + 1];
    const third = words[i + 2];
    switch (w) {
      case "(":
        depth += 1;
        break;
      case ")":
        depth = Math.max(0, depth - 1);
        break;
      case "USE":
        if (depth === 0) return w;
        break;
      case "COMMIT":
        return w;
      case "BEGIN":
        if (second === "TRAN" || second === "TRANSACTION" || second === "DISTRIBUTED")
          return "BEGIN TRANSACTION";
        break;
      case "ROLLBACK":
        // ROLLBACK TRAN savepoint keeps the transaction open; the inbox's transaction itself has no name.
        if (!(
          (second === "TRAN" || second === "TRANSACTION") &&
          third !== undefined &&
          /^[A-Z_@]/.test(third)
        ))
          return w;
        if (rules !== "handler") return "ROLLBACK TRANSACTION savepoint";
        break;
      case "SAVE":
        if (rules !== "handler" && (second === "TRAN" || second === "TRANSACTION")) return "SAVE TRANSACTION";
        break;
      case "DECLARE":
        // A reserved word: wherever it stands, it declares.
        if (rules === "statements") return w;
        break;
      case "SET":
        // A session option is SET <name> <value>; SET col = ..., SET t.col += ... and SET @v = ... are not.
        if (second !== undefined && /^[A-Z_]/.test(second) && (third === undefined || /^[\w@']/.test(third)))
          return `SET ${second}`;
        break;
    }
  }
  return undefined;
}
