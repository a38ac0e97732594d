-- The notes the NoteCreated handler writes. Applied by `sbinbox migrate` as the deployment's user; the worker's
-- role only needs SELECT, INSERT, UPDATE and DELETE on it.
CREATE TABLE notes (
  note_id bigint PRIMARY KEY,
  text varchar(4000) NOT NULL,
  -- The MessageId that created the note, for tracing an effect back to its message.
  message_id varchar(128) NOT NULL,
  created_utc timestamptz NOT NULL DEFAULT now()
);
