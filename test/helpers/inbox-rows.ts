import { messageKey } from "../../src/inbox/message-key.ts";

/** What these helpers need: a pg Pool, Client or the store's sql. */
interface Queries {
  query(sql: string, params?: unknown[]): Promise<unknown>;
}

/**
 * A marker written as another instance writes it (PostgreSQL, default schema): the consumer registered, the key
 * from the MessageId; `open` leaves it a two-phase claim not yet processed.
 */
export async function insertMarker(
  db: Queries,
  messageId: string,
  consumer: string,
  open = false,
): Promise<void> {
  await db.query(
    `INSERT INTO "InboxConsumer" ("Name") SELECT $1::varchar
WHERE NOT EXISTS (SELECT 1 FROM "InboxConsumer" WHERE "Name" = $1::varchar) ON CONFLICT DO NOTHING`,
    [consumer],
  );
  await db.query(
    `INSERT INTO "Inbox" ("ConsumerId", "MessageKey", "ClaimedUtc")
VALUES ((SELECT "Id" FROM "InboxConsumer" WHERE "Name" = $2), $1, CASE WHEN $3::boolean THEN now() END)`,
    [messageKey(messageId), consumer, open],
  );
}

/** Closes an open claim as its claimant would on finishing. */
export async function markProcessed(db: Queries, messageId: string): Promise<void> {
  await db.query(`UPDATE "Inbox" SET "ClaimedUtc" = NULL WHERE "MessageKey" = $1`, [messageKey(messageId)]);
}
