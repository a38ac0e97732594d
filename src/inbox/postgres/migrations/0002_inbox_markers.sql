-- Smaller markers (issue 41): 60 bytes a heap row instead of about 100, a 32-byte unique index entry instead of
-- about 60. The old table is renamed InboxLegacy and frozen: a worker of the previous version fails on the new
-- table's columns instead of writing a marker the new workers would not see (docs/inbox.md, "Moving to 0002").
-- The new workers read InboxLegacy's processed markers while it has any, and retention empties it.
ALTER TABLE "Inbox" RENAME TO "InboxLegacy";
ALTER INDEX "Inbox_pkey" RENAME TO "InboxLegacy_pkey";
-- The legacy indexes keep their names, as on SQL Server; the new ones are named for their columns.
ALTER SEQUENCE "Inbox_Id_seq" RENAME TO "InboxLegacy_Id_seq";

-- One row per consumer name; the markers carry its 2-byte Id. Registered by the worker on first use.
CREATE TABLE "InboxConsumer" (
  "Id" smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  "Name" varchar(200) COLLATE "C" NOT NULL CONSTRAINT "UQ_InboxConsumer_Name" UNIQUE
);

-- Column order is for alignment: 8 + 4 + 2 bytes, then the 1-byte-header key; ClaimedUtc is null (no bytes) on a
-- processed marker. Heap row: 24-byte header + 32 bytes of data.
CREATE TABLE "Inbox" (
  "Id" bigint GENERATED ALWAYS AS IDENTITY,
  -- Whole seconds since 2020-01-01 UTC (an integer lasts until 2088): 4 bytes where a timestamptz takes 8.
  "ReceivedSec" integer NOT NULL DEFAULT floor(extract(epoch FROM now()) - 1577836800)::integer,
  "ConsumerId" smallint NOT NULL,
  -- The MessageId's key (src/inbox/message-key.ts): 16 bytes for a canonical lowercase UUID, else its exact text.
  -- 386 bytes: 128 characters of 3 UTF-8 bytes and the suffix; Service Bus refuses longer MessageIds anyway.
  "MessageKey" bytea NOT NULL CONSTRAINT "CK_Inbox_MessageKey_Length" CHECK (octet_length("MessageKey") <= 386),
  -- Set while a two-phase claim is open, null once processed (and on every one-phase marker).
  "ClaimedUtc" timestamptz NULL,
  -- Ids only grow, so the key's pages fill whole (the default 90 leaves a tenth empty).
  CONSTRAINT "Inbox_pkey" PRIMARY KEY ("Id") WITH (fillfactor = 100)
);

CREATE UNIQUE INDEX "IX_Inbox_MessageKey_ConsumerId" ON "Inbox" ("MessageKey", "ConsumerId");

-- Open two-phase claims only: the sweeper and the open-claims gauge read it. Retention walks the primary key.
CREATE INDEX "IX_Inbox_ClaimedUtc" ON "Inbox" ("ClaimedUtc") WHERE "ClaimedUtc" IS NOT NULL;

-- The markers as people read them: the MessageId and consumer name back from their keys, the time as a time. For
-- operators and tests; the worker never reads it (a MessageId in a WHERE on it cannot use the unique index:
-- docs/inbox.md shows the query by key). A lone-surrogate key (0xFE, UTF-16) shows as its hex.
CREATE VIEW "InboxMarkers" AS
SELECT i."Id",
  CASE
    WHEN octet_length(i."MessageKey") = 16 THEN encode(i."MessageKey", 'hex')::uuid::text
    WHEN get_byte(i."MessageKey", 0) = 254 THEN '\x' || encode(i."MessageKey", 'hex')
    ELSE convert_from(rtrim(i."MessageKey", '\xff'::bytea), 'UTF8')
  END AS "MessageId",
  c."Name" AS "Consumer",
  to_timestamp(i."ReceivedSec" + 1577836800) AS "ReceivedUtc",
  i."ClaimedUtc",
  i."ClaimedUtc" IS NULL AS "Processed"
FROM "Inbox" AS i JOIN "InboxConsumer" AS c ON c."Id" = i."ConsumerId";

-- A new inbox (nothing was ever received) needs no legacy table; no worker writes it after the rename.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM "InboxLegacy") THEN
    DROP TABLE "InboxLegacy";
  END IF;
END
$$;
