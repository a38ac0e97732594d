-- Smaller markers (issue 41): the MessageId as a 16-byte key for a canonical lowercase UUID (its text
-- otherwise), the consumer as a 2-byte key of InboxConsumer, the time in 4 bytes, no ReceivedUtc index. The old
-- table is renamed InboxLegacy and frozen: a worker of the previous version fails on the new table's columns
-- instead of writing a marker the new workers would not see (docs/inbox.md, "Moving to 0002"). The new workers
-- read InboxLegacy's processed markers while it has any, and retention empties it.
-- One batch, no GO: the migration runner sends the file as it is, inside its transaction.
-- The legacy table keeps its constraints' and indexes' names (Babelfish renames neither), so the new ones differ.
-- sp_rename takes the name as schema.name without brackets (Babelfish refuses them); the runner's schema is a
-- plain identifier (src/inbox/schema-name.ts).
DECLARE @legacy nvarchar(300) = OBJECT_SCHEMA_NAME(OBJECT_ID(N'dbo.Inbox')) + N'.Inbox';
EXEC sp_rename @legacy, N'InboxLegacy', N'OBJECT';

CREATE TABLE dbo.InboxConsumer (
  Id smallint IDENTITY(1, 1) NOT NULL CONSTRAINT PK_InboxConsumer PRIMARY KEY CLUSTERED,
  Name nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT UQ_InboxConsumer_Name UNIQUE
);

CREATE TABLE dbo.Inbox (
  Id bigint IDENTITY(1, 1) NOT NULL CONSTRAINT PK_InboxMarkers PRIMARY KEY CLUSTERED,
  -- Whole seconds since 2020-01-01 UTC (an int lasts until 2088): 4 bytes where datetime2(3) takes 7.
  ReceivedSec int NOT NULL CONSTRAINT DF_InboxMarkers_ReceivedSec DEFAULT DATEDIFF(second, '20200101', SYSUTCDATETIME()),
  ConsumerId smallint NOT NULL,
  -- The MessageId's key (src/inbox/message-key.ts): 16 bytes for a canonical lowercase UUID, else its exact text.
  -- 386 bytes: 128 characters of 3 UTF-8 bytes and the suffix; Service Bus refuses longer MessageIds anyway.
  MessageKey varbinary(386) NOT NULL,
  -- Set while a two-phase claim is open, null once processed (and on every one-phase marker).
  ClaimedUtc datetime2(3) NULL
);

CREATE UNIQUE NONCLUSTERED INDEX IX_Inbox_MessageKey_ConsumerId ON dbo.Inbox (MessageKey, ConsumerId);

-- Open two-phase claims only: the sweeper and the open-claims gauge read it. Retention walks the clustered key.
CREATE NONCLUSTERED INDEX IX_Inbox_ClaimedUtc ON dbo.Inbox (ClaimedUtc) WHERE ClaimedUtc IS NOT NULL;

-- A new inbox (nothing was ever received) needs no legacy table; no worker writes it after the rename.
IF NOT EXISTS (SELECT 1 FROM dbo.InboxLegacy)
  DROP TABLE dbo.InboxLegacy;
