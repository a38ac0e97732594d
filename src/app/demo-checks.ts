import { accountSql } from "../example/accounts.ts";
import type { PublishEvent } from "../servicebus/publisher.ts";

/** What the demos and the chaos run read their verdicts from: this process's own pool on a consumer's database. */
export interface Queryable {
  query<R>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
}

/** Distinct events applied so far (credit rows by MessageId). */
export async function appliedCount(sql: Queryable): Promise<number> {
  const { rows } = await sql.query<{ n: number }>(
    "SELECT count(DISTINCT message_id)::int AS n FROM example_credits",
  );
  return Number(rows[0]?.n ?? 0);
}

export interface Tally {
  /** Credit rows per MessageId. */
  readonly perMessage: ReadonlyMap<string, number>;
  readonly effects: number;
  /** Expected events with no credit row. */
  readonly lost: number;
  /** Events with more than one credit row. */
  readonly doubled: number;
  /** Credit rows of no expected event. */
  readonly unexpected: number;
}

/** The business table against the events that should have reached it, each exactly once. */
export async function tally(sql: Queryable, expected: ReadonlySet<string>): Promise<Tally> {
  const { rows } = await sql.query<{ messageId: string; n: number }>(accountSql.creditsPerMessage.postgres);
  const perMessage = new Map(rows.map((r) => [r.messageId, Number(r.n)]));
  return {
    perMessage,
    effects: [...perMessage.values()].reduce((a, b) => a + b, 0),
    lost: [...expected].filter((id) => !perMessage.has(id)).length,
    doubled: [...perMessage.values()].filter((n) => n > 1).length,
    unexpected: [...perMessage.keys()].filter((id) => !expected.has(id)).length,
  };
}

/** Each account's balance is the sum of the amounts of the events credited to it, no more and no less. */
export async function balancesMatch(sql: Queryable, events: readonly PublishEvent[]): Promise<boolean> {
  const want = new Map<string, number>();
  for (const e of events) {
    const body = e.body as { accountId: string; amount: number };
    want.set(body.accountId, (want.get(body.accountId) ?? 0) + body.amount);
  }
  const { rows } = await sql.query<{ account_id: string; balance: string }>(
    "SELECT account_id, balance FROM example_accounts",
  );
  if (rows.length !== want.size) return false;
  return rows.every((r) => want.get(r.account_id) === Number(r.balance));
}

export interface AppliedCredit {
  readonly accountId: string;
  readonly messageId: string;
}

/**
 * The credit rows in the order they were applied. Their identity is taken at the insert, inside the handler's
 * transaction, and in session mode an account's next event is received only after the previous one is settled (so
 * committed): per account, identity order is the order of application.
 */
export async function appliedOrder(sql: Queryable): Promise<AppliedCredit[]> {
  const { rows } = await sql.query<{ account_id: string; message_id: string }>(
    "SELECT account_id, message_id FROM example_credits ORDER BY id",
  );
  return rows.map((r) => ({ accountId: r.account_id, messageId: r.message_id }));
}

/**
 * Applications out of their account's order: a credit whose number within its account is not above the last one
 * applied to that account (an earlier event applied after a later one, or one applied twice). A gap is not counted
 * here: a missing event is `lost`. Credits of events without a number (not of the sequences) are left out.
 */
export function outOfOrder(
  applied: readonly AppliedCredit[],
  sequenceOf: ReadonlyMap<string, number>,
): number {
  const last = new Map<string, number>();
  let count = 0;
  for (const { accountId, messageId } of applied) {
    const sequence = sequenceOf.get(messageId);
    if (sequence === undefined) continue;
    const before = last.get(accountId);
    if (before !== undefined && sequence <= before) count += 1;
    else last.set(accountId, sequence);
  }
  return count;
}
