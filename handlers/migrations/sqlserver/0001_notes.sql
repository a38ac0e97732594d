-- The notes the NoteCreated handler writes. Applied by `sbinbox migrate` as the deployment's Entra admin; the
-- worker's user has db_datareader and db_datawriter only.
-- One batch, no GO: the migration runner sends the file as it is, inside its transaction.
CREATE TABLE dbo.Notes (
  NoteId bigint NOT NULL CONSTRAINT PK_Notes PRIMARY KEY,
  Text nvarchar(4000) NOT NULL,
  -- The MessageId that created the note, for tracing an effect back to its message.
  MessageId nvarchar(128) NOT NULL,
  CreatedUtc datetime2(3) NOT NULL CONSTRAINT DF_Notes_CreatedUtc DEFAULT SYSUTCDATETIME()
);
