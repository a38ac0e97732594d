import { z } from "zod";
import type { TransactionalHandler } from "sbinbox";
import { notesSql } from "./statements.ts";

export const noteCreatedSchema = z.object({
  noteId: z.number().int().positive(),
  text: z.string().max(4000),
});
export type NoteCreated = z.infer<typeof noteCreatedSchema>;

/**
 * A note is written in the same transaction as the inbox marker, so a redelivered NoteCreated commits nothing
 * twice. A second NoteCreated for the same note under another MessageId hits the table's primary key: that is a
 * business error (a unique violation, permanent): retried as the policy says (once by default), then dead-lettered
 * as RetriesExhausted, never silently dropped.
 */
export const noteCreated: TransactionalHandler<NoteCreated> = {
  kind: "transactional",
  type: "NoteCreated", // the message's subject (or application property "type")
  schema: noteCreatedSchema,
  // The one row it writes is the note's: notes of other ids may be applied side by side (docs/batching.md).
  keys: (body) => `note:${body.noteId}`,
  async handle(body, tx, context) {
    // tx is bound to the inbox transaction: the marker and this write commit together or not at all.
    await tx.query(notesSql.insertNote[tx.dialect], [body.noteId, body.text, context.messageId]);
  },
};
