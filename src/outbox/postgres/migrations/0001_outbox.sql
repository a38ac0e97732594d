-- The outbox: one row per event an upstream transaction committed, waiting to be sent (SentUtc null) or sent.
-- Id is the key and the order of sending; rows are written by the caller's own transaction (src/outbox/enqueue.ts).
CREATE TABLE "Outbox" (
  "Id" bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- Derived from (Type, Key) exactly as the publisher derives it, so a resend is dropped by the broker.
  "MessageId" varchar(128) COLLATE "C" NOT NULL,
  "Type" varchar(200) COLLATE "C" NOT NULL,
  "Key" varchar(400) COLLATE "C" NOT NULL,
  -- The JSON text of the body, sent as UTF-8 bytes.
  "Body" text NOT NULL,
  -- JSON object of application properties, or null.
  "Properties" text NULL,
  "CorrelationId" varchar(128) NULL,
  -- W3C trace context of the enqueueing transaction; the relay's send span continues it.
  "TraceParent" varchar(55) NULL,
  "TraceState" varchar(512) NULL,
  "CreatedUtc" timestamptz NOT NULL DEFAULT now(),
  "SentUtc" timestamptz NULL,
  "Attempts" integer NOT NULL DEFAULT 0,
  -- When a relay first tried to send the row: a copy may have reached the broker from then on.
  "FirstAttemptUtc" timestamptz NULL,
  -- A relay's claim on the row; another relay takes it only after this time.
  "LockedUntilUtc" timestamptz NULL,
  -- A row the broker refused for good, with the error: kept for an operator, never retried.
  "SetAsideUtc" timestamptz NULL,
  "Error" text NULL
);

-- "Unsent in order": the relay's claim and the lag gauge walk it.
CREATE INDEX "IX_Outbox_Unsent" ON "Outbox" ("Id") WHERE "SentUtc" IS NULL AND "SetAsideUtc" IS NULL;

-- Retention deletes sent rows by age, in small batches.
CREATE INDEX "IX_Outbox_SentUtc" ON "Outbox" ("SentUtc") WHERE "SentUtc" IS NOT NULL;

-- Rows set aside, for the gauge and the operator.
CREATE INDEX "IX_Outbox_SetAside" ON "Outbox" ("Id") WHERE "SetAsideUtc" IS NOT NULL;
