-- The session key of an event for a session-enabled entity (sent as sessionId and partition key), or null.
-- A row with one is claimed only as the head of its key: when no earlier row of that key is still unsent.
ALTER TABLE "Outbox" ADD COLUMN "SessionId" varchar(128) COLLATE "C" NULL;

-- The claim's "is there an earlier unsent row of this key" look, and nothing else: rows without a key are not in it.
CREATE INDEX "IX_Outbox_UnsentSession" ON "Outbox" ("SessionId", "Id")
  WHERE "SentUtc" IS NULL AND "SessionId" IS NOT NULL;

-- The claim's rows without a key, in Id order: read apart from the keyed rows, so that a key's backlog (which only
-- its head may leave) is never scanned by a claim looking for rows without a key.
CREATE INDEX "IX_Outbox_UnsentNoSession" ON "Outbox" ("Id")
  WHERE "SentUtc" IS NULL AND "SetAsideUtc" IS NULL AND "SessionId" IS NULL;
