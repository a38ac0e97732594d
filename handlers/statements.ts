import type { DialectSql } from "sbinbox";

/** Every statement the handlers send, per dialect; `npm run check:tsql` parses the SQL Server ones. */
export const notesSql = {
  insertNote: {
    postgres: "INSERT INTO notes (note_id, text, message_id) VALUES ($1, $2, $3)",
    sqlserver: "INSERT INTO dbo.Notes (NoteId, Text, MessageId) VALUES (@p1, @p2, @p3);",
  },
} satisfies Record<string, DialectSql>;
