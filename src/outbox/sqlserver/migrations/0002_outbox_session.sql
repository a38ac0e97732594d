-- The session key of an event for a session-enabled entity (sent as sessionId and partition key), or null.
-- A row with one is claimed only as the head of its key: when no earlier row of that key is still unsent.
-- One batch, no GO: the index is created through EXEC, so that it is compiled after the column exists.
ALTER TABLE dbo.Outbox ADD SessionId nvarchar(128) COLLATE Latin1_General_100_BIN2 NULL;
EXEC (N'CREATE NONCLUSTERED INDEX IX_Outbox_UnsentSession ON dbo.Outbox (SessionId, Id)
  WHERE SentUtc IS NULL AND SessionId IS NOT NULL;');
-- The claim's rows without a key, in Id order: read apart from the keyed rows, so that a key's backlog (which only
-- its head may leave) is never scanned by a claim looking for rows without a key.
EXEC (N'CREATE NONCLUSTERED INDEX IX_Outbox_UnsentNoSession ON dbo.Outbox (Id)
  WHERE SentUtc IS NULL AND SetAsideUtc IS NULL AND SessionId IS NULL;');
