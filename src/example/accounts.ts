import { z } from "zod";
import type {
  MessageContext,
  Statement,
  StatementsHandler,
  TransactionalHandler,
} from "../domain/handler.ts";
import type { DialectSql } from "../domain/sql.ts";
import { ACCOUNT_CREDITED } from "./event-types.ts";

/**
 * The seeds' example: crediting an account. Each credit is a row of its own, with no unique constraint, so a
 * doubled effect would show as two rows: only the inbox stands between a redelivery and a second credit.
 */
export { ACCOUNT_CREDITED };

export const accountCreditedSchema = z.object({
  accountId: z.string().min(1).max(100),
  amount: z.number().int().positive().max(1_000_000_000),
  reference: z.string().max(200).optional(),
  /** Demo only: the handler fails once in each process before it succeeds (a transient fault). */
  failOnce: z.boolean().optional(),
  /** Chaos only: the handler fails its first N attempts (a downstream that is down for a while), then recovers. */
  failAttempts: z.number().int().nonnegative().max(100).optional(),
  /** The sessions demo: the event's number within its account (its session), against which the order is checked. */
  sequence: z.number().int().positive().optional(),
});
export type AccountCredited = z.infer<typeof accountCreditedSchema>;

/** Statements as data, one per dialect. The tables come from migrations/ (applied by `sbinbox migrate`). */
export const accountSql = {
  insertCredit: {
    postgres: "INSERT INTO example_credits (message_id, account_id, amount) VALUES ($1, $2, $3)",
    sqlserver: "INSERT INTO dbo.ExampleCredits (MessageId, AccountId, Amount) VALUES (@p1, @p2, @p3)",
  },
  addToBalance: {
    postgres:
      "INSERT INTO example_accounts (account_id, balance) VALUES ($1, $2) " +
      "ON CONFLICT (account_id) DO UPDATE SET balance = example_accounts.balance + EXCLUDED.balance",
    // Not MERGE, which has documented concurrency pitfalls and which not every TDS server has: the update holds the
    // key (or, when the row is missing, the range where it would be) until commit, so a concurrent credit of the
    // same new account waits and then updates the row this one inserts; on a server that ignores the hints, the
    // second insert meets the primary key, its transaction rolls back whole and the message is redelivered.
    sqlserver:
      "UPDATE dbo.ExampleAccounts WITH (UPDLOCK, HOLDLOCK) SET Balance = Balance + @p2 WHERE AccountId = @p1; " +
      "IF @@ROWCOUNT = 0 INSERT INTO dbo.ExampleAccounts (AccountId, Balance) VALUES (@p1, @p2);",
  },
  /** Per MessageId, how many credit rows exist: the demo's lost/doubled check. */
  creditsPerMessage: {
    postgres: 'SELECT message_id AS "messageId", count(*)::int AS n FROM example_credits GROUP BY message_id',
    sqlserver: "SELECT MessageId AS messageId, COUNT(*) AS n FROM dbo.ExampleCredits GROUP BY MessageId",
  },
  countCredits: {
    postgres: "SELECT count(*)::int AS n FROM example_credits",
    sqlserver: "SELECT COUNT(*) AS n FROM dbo.ExampleCredits",
  },
} satisfies Record<string, DialectSql>;

/** A failure that goes away on retry, as a flaky downstream would cause. */
export class TransientDemoError extends Error {
  constructor(messageId: string) {
    super(`demo: failing ${messageId} once, as a transient fault`);
    this.name = "TransientDemoError";
  }
}

/**
 * A downstream that stays down for a while, whichever process calls it: counted in attempts, which travel with
 * the message (its retry copies carry them), so every worker process sees the same outage. Transient.
 */
export class DownstreamDownError extends Error {
  constructor(attempt: number, failing: number) {
    super(`demo: the downstream is down (attempt ${attempt} of the first ${failing} that fail)`);
    this.name = "DownstreamDownError";
  }
}

/** The demo's and the chaos run's faults, asked for by the body (failOnce, failAttempts). */
function demoFaults(failedOnce: Set<string>, body: AccountCredited, context: MessageContext): void {
  if (body.failOnce && !failedOnce.has(context.messageId)) {
    failedOnce.add(context.messageId);
    throw new TransientDemoError(context.messageId);
  }
  if (body.failAttempts !== undefined && context.attempt <= body.failAttempts) {
    throw new DownstreamDownError(context.attempt, body.failAttempts);
  }
}

export function accountCreditedHandler(): TransactionalHandler<AccountCredited> {
  const failedOnce = new Set<string>();
  return {
    kind: "transactional",
    type: ACCOUNT_CREDITED,
    schema: accountCreditedSchema,
    // Every row the handler writes is the account's (its balance, its credits): credits of other accounts may be
    // applied side by side, those of one account one after another (docs/batching.md).
    keys: (body) => `account:${body.accountId}`,
    async handle(body, tx, context) {
      demoFaults(failedOnce, body, context);
      await tx.query(accountSql.insertCredit[tx.dialect], [context.messageId, body.accountId, body.amount]);
      await tx.query(accountSql.addToBalance[tx.dialect], [body.accountId, body.amount]);
    },
  };
}

/**
 * The same credit as a statements handler: it returns the two statements instead of running them, so the worker
 * sends them with the inbox marker in one request, and a batch of credits in one request for the whole batch
 * (docs/batching.md). Neither statement depends on the other's result, which is what the kind requires.
 */
export function accountCreditedStatementsHandler(): StatementsHandler<AccountCredited> {
  const failedOnce = new Set<string>();
  return {
    kind: "statements",
    type: ACCOUNT_CREDITED,
    schema: accountCreditedSchema,
    keys: (body) => `account:${body.accountId}`,
    statements(body, context): Statement[] {
      demoFaults(failedOnce, body, context);
      return [
        { sql: accountSql.insertCredit, params: [context.messageId, body.accountId, body.amount] },
        { sql: accountSql.addToBalance, params: [body.accountId, body.amount] },
      ];
    },
  };
}
