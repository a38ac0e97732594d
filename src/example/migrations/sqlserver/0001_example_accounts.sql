-- The example's business tables. Guarded: databases where an earlier worker created them at start-up.
-- One batch, no GO: the migration runner sends the file as it is, inside its transaction.
IF OBJECT_ID(N'dbo.ExampleCredits', N'U') IS NULL
  CREATE TABLE dbo.ExampleCredits (
    Id bigint IDENTITY(1,1) NOT NULL CONSTRAINT PK_ExampleCredits PRIMARY KEY,
    MessageId nvarchar(128) NOT NULL,
    AccountId nvarchar(100) NOT NULL,
    Amount bigint NOT NULL,
    CreatedUtc datetime2 NOT NULL CONSTRAINT DF_ExampleCredits_CreatedUtc DEFAULT SYSUTCDATETIME()
  );

IF OBJECT_ID(N'dbo.ExampleAccounts', N'U') IS NULL
  CREATE TABLE dbo.ExampleAccounts (
    AccountId nvarchar(100) NOT NULL CONSTRAINT PK_ExampleAccounts PRIMARY KEY,
    Balance bigint NOT NULL
  );
