import type { z } from "zod";
import type { DialectSql, SqlExecutor } from "./sql.ts";

/** What a handler knows about the message it is given. Nothing here can write anywhere. */
export interface MessageContext {
  /** The inbox key: the original MessageId, also on a scheduled retry or a replayed copy. */
  readonly messageId: string;
  /** 1 on the first processing, then one more on each retry (in place or by a scheduled copy). */
  readonly attempt: number;
  readonly consumer: string;
  readonly type: string;
  readonly deliveryCount: number;
  readonly correlationId?: string;
  readonly enqueuedTime?: Date;
  readonly applicationProperties: Readonly<Record<string, unknown>>;
  /** The message's session, on a session-enabled entity (a handler may key by it). */
  readonly sessionId?: string;
  /** The message's partition key, when its sender set one (a handler may key by it). */
  readonly partitionKey?: string;
}

/**
 * The business change, written only through `tx`: the same transaction that holds the inbox marker,
 * so the change and the marker commit together or not at all.
 */
export interface TransactionalHandler<T = unknown> {
  readonly kind: "transactional";
  readonly type: string;
  readonly schema: z.ZodType<T>;
  /** Body fields holding personal data (dotted paths, e.g. "customer.email"): masked in the console by default. */
  readonly personal?: readonly string[];
  handle(body: T, tx: SqlExecutor, context: MessageContext): Promise<void>;
  /**
   * The rows this message's change may touch, named by the handler from the body (for example
   * `account:${body.accountId}`). Messages whose keys are disjoint may be applied side by side (in one batch and in
   * batches in flight at once); messages that share a key are applied one after another, in arrival order. A
   * handler that declares no keys may touch anything: its messages are never run beside another.
   */
  keys?(body: T, context: MessageContext): string | readonly string[];
}

/** One parameterised statement: positional parameters, `$1..` on PostgreSQL, `@p1..` on SQL Server. */
export interface Statement {
  readonly sql: string | DialectSql;
  readonly params?: readonly unknown[];
}

/**
 * A transactional change given as data: the statements for a message instead of running them. The worker runs
 * them in the message's inbox transaction, and in a batch sends the statements of many messages to the database in
 * one request (the only way to save round trips on SQL Server, where one connection runs one request at a time).
 * The statements must not depend on each other's results.
 */
export interface StatementsHandler<T = unknown> {
  readonly kind: "statements";
  readonly type: string;
  readonly schema: z.ZodType<T>;
  /** Body fields holding personal data (dotted paths, e.g. "customer.email"): masked in the console by default. */
  readonly personal?: readonly string[];
  statements(body: T, context: MessageContext): readonly Statement[];
  /** As on a transactional handler. */
  keys?(body: T, context: MessageContext): string | readonly string[];
}

/**
 * An effect outside the database (e-mail, payment, HTTP call). It runs after the claim commits and must
 * pass `idempotencyKey` (the original MessageId) to the external system, which must dedupe by it: a retry
 * re-enters the open claim and performs the effect again with the same key whenever it cannot know whether the
 * earlier call took effect.
 */
export interface TwoPhaseHandler<T = unknown> {
  readonly kind: "two-phase";
  readonly type: string;
  readonly schema: z.ZodType<T>;
  /** Body fields holding personal data (dotted paths, e.g. "customer.email"): masked in the console by default. */
  readonly personal?: readonly string[];
  perform(body: T, context: MessageContext & { readonly idempotencyKey: string }): Promise<void>;
}

export type MessageHandler<T = unknown> = TransactionalHandler<T> | StatementsHandler<T> | TwoPhaseHandler<T>;
