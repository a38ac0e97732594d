-- The inbox: one row per (message, consumer) whose effect is done (ProcessedUtc set) or claimed (ProcessedUtc null).
-- Id is the key; the unique index on (MessageId, Consumer) is what turns a redelivery into a duplicate.
CREATE TABLE "Inbox" (
  "Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- Service Bus MessageIds are strings of up to 128 characters, compared exactly (case matters).
  "MessageId" varchar(128) COLLATE "C" NOT NULL,
  "Consumer" varchar(200) COLLATE "C" NOT NULL,
  "ReceivedUtc" timestamptz NOT NULL DEFAULT now(),
  "ProcessedUtc" timestamptz NULL
);

CREATE UNIQUE INDEX "IX_Inbox_MessageId_Consumer" ON "Inbox" ("MessageId", "Consumer");

-- Retention cleanup walks this index in small batches.
CREATE INDEX "IX_Inbox_ReceivedUtc" ON "Inbox" ("ReceivedUtc");

-- Open two-phase claims only: the sweeper and the open-claims gauge read it.
CREATE INDEX "IX_Inbox_OpenClaims" ON "Inbox" ("ReceivedUtc") WHERE "ProcessedUtc" IS NULL;
