-- The inbox: one row per (message, consumer) whose effect is done (ProcessedUtc set) or claimed (ProcessedUtc null).
-- A sequential bigint Id is the clustered key, so inserts append; the unique index on (MessageId, Consumer)
-- is what turns a redelivery into a duplicate (errors 2601/2627 on the marker insert).
-- One batch, no GO: the migration runner sends the file as it is, inside its transaction.
CREATE TABLE dbo.Inbox (
  Id bigint IDENTITY(1, 1) NOT NULL CONSTRAINT PK_Inbox PRIMARY KEY CLUSTERED,
  -- Service Bus MessageIds are strings of up to 128 characters, compared exactly: a binary collation, so
  -- ids differing only in case are not taken for duplicates under a case-insensitive database collation.
  MessageId nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
  Consumer nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
  ReceivedUtc datetime2(3) NOT NULL CONSTRAINT DF_Inbox_ReceivedUtc DEFAULT SYSUTCDATETIME(),
  ProcessedUtc datetime2(3) NULL
);

CREATE UNIQUE NONCLUSTERED INDEX IX_Inbox_MessageId_Consumer ON dbo.Inbox (MessageId, Consumer);

-- Retention cleanup walks this index in small batches.
CREATE NONCLUSTERED INDEX IX_Inbox_ReceivedUtc ON dbo.Inbox (ReceivedUtc);

-- Open two-phase claims only: the sweeper and the open-claims gauge read it.
CREATE NONCLUSTERED INDEX IX_Inbox_OpenClaims ON dbo.Inbox (ReceivedUtc) WHERE ProcessedUtc IS NULL;
