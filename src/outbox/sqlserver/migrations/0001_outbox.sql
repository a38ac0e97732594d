-- The outbox: one row per event an upstream transaction committed, waiting to be sent (SentUtc null) or sent.
-- A sequential bigint Id is the clustered key and the order of sending; rows are written by the caller's own
-- transaction (src/outbox/enqueue.ts). One batch, no GO: the migration runner sends the file as it is.
CREATE TABLE dbo.Outbox (
  Id bigint IDENTITY(1, 1) NOT NULL CONSTRAINT PK_Outbox PRIMARY KEY CLUSTERED,
  -- Derived from (Type, Key) exactly as the publisher derives it, so a resend is dropped by the broker.
  MessageId nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Type nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
  [Key] nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
  -- The JSON text of the body, sent as UTF-8 bytes.
  Body nvarchar(max) NOT NULL,
  -- JSON object of application properties, or null.
  Properties nvarchar(max) NULL,
  CorrelationId nvarchar(128) NULL,
  -- W3C trace context of the enqueueing transaction; the relay's send span continues it.
  TraceParent varchar(55) NULL,
  TraceState varchar(512) NULL,
  CreatedUtc datetime2(3) NOT NULL CONSTRAINT DF_Outbox_CreatedUtc DEFAULT SYSUTCDATETIME(),
  SentUtc datetime2(3) NULL,
  Attempts int NOT NULL CONSTRAINT DF_Outbox_Attempts DEFAULT 0,
  -- When a relay first tried to send the row: a copy may have reached the broker from then on.
  FirstAttemptUtc datetime2(3) NULL,
  -- A relay's claim on the row; another relay takes it only after this time.
  LockedUntilUtc datetime2(3) NULL,
  -- A row the broker refused for good, with the error: kept for an operator, never retried.
  SetAsideUtc datetime2(3) NULL,
  Error nvarchar(4000) NULL
);

-- "Unsent in order": the relay's claim and the lag gauge walk it.
CREATE NONCLUSTERED INDEX IX_Outbox_Unsent ON dbo.Outbox (Id)
  INCLUDE (LockedUntilUtc, FirstAttemptUtc, CreatedUtc) WHERE SentUtc IS NULL AND SetAsideUtc IS NULL;

-- Retention deletes sent rows by age, in small batches.
CREATE NONCLUSTERED INDEX IX_Outbox_SentUtc ON dbo.Outbox (SentUtc) WHERE SentUtc IS NOT NULL;

-- Rows set aside, for the gauge and the operator.
CREATE NONCLUSTERED INDEX IX_Outbox_SetAside ON dbo.Outbox (Id) WHERE SetAsideUtc IS NOT NULL;
