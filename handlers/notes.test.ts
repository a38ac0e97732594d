// The notes module's tests, as your team writes its own: the harness runs the real worker on the local broker and an
// embedded PostgreSQL in this process (docs/handlers.md, "Testing your handlers"); the fakes test the handler alone.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { fakeContext, fakeTransaction, startHarness, type Harness } from "sbinbox-dev/testing";
import { noteCreated } from "./notes.ts";

describe("NoteCreated, through the worker", function () {
  this.timeout(60_000);
  let harness: Harness;
  before(async () => {
    // The module as SBINBOX_HANDLERS names it; its migrations are applied after the inbox's.
    harness = await startHarness({ module: fileURLToPath(new URL("./index.ts", import.meta.url)) });
  });
  after(async () => {
    await harness?.stop();
  });

  it("is applied once: one note, keyed to its message", async () => {
    const id = await harness.publish("NoteCreated", "n-1", { noteId: 1, text: "hello" });
    const outcome = await harness.outcome(id);
    assert.equal(outcome.status, "committed");
    const { rows } = await harness.db.query("SELECT text, message_id FROM notes WHERE note_id = 1");
    assert.deepEqual(rows, [{ text: "hello", message_id: id }]);
  });

  it("a resend is dropped by the broker inside the window, and is a duplicate in the inbox after it", async () => {
    const id = await harness.publish("NoteCreated", "n-2", { noteId: 2, text: "once" });
    assert.equal((await harness.outcome(id)).status, "committed");
    const resend = { messageId: id, subject: "NoteCreated", body: { noteId: 2, text: "once" } };
    await harness.sendRaw(resend);
    assert.equal((await harness.outcome(id)).status, "dropped-by-broker");
    await harness.sendRaw(resend, { pastDuplicateWindow: true });
    assert.equal((await harness.outcome(id)).status, "duplicate");
    const { rows } = await harness.db.query("SELECT count(*)::integer AS n FROM notes WHERE note_id = 2");
    assert.deepEqual(rows, [{ n: 1 }]);
  });

  it("a malformed note is dead-lettered with the reason, and writes nothing", async () => {
    const schema = await harness.sendRaw({
      messageId: "bad-note",
      subject: "NoteCreated",
      body: { noteId: -3, text: "a note needs a positive id" },
    });
    const outcome = await harness.outcome(schema);
    assert.equal(outcome.status, "dead-lettered");
    assert.equal(outcome.status === "dead-lettered" && outcome.reason, "SchemaViolation");
    const notJson = await harness.sendRaw({
      messageId: "not-json",
      subject: "NoteCreated",
      body: Buffer.from("{"),
    });
    const second = await harness.outcome(notJson);
    assert.equal(second.status === "dead-lettered" && second.reason, "UndecodableBody");
    const { rows } = await harness.db.query("SELECT count(*)::integer AS n FROM notes WHERE note_id = -3");
    assert.deepEqual(rows, [{ n: 0 }]);
  });
});

describe("NoteCreated's handler alone (a fake transaction)", () => {
  it("inserts the note with the MessageId, in the dialect's own statement", async () => {
    for (const dialect of ["postgres", "sqlserver"] as const) {
      const tx = fakeTransaction({ dialect });
      await noteCreated.handle({ noteId: 4, text: "x" }, tx, fakeContext({ messageId: "m-4" }));
      assert.equal(tx.statements.length, 1);
      assert.match(
        tx.statements[0]!.sql,
        dialect === "postgres" ? /INSERT INTO notes/ : /INSERT INTO dbo\.Notes/,
      );
      assert.deepEqual(tx.statements[0]!.params, [4, "x", "m-4"]);
    }
  });

  it("a failing statement fails the handler (the worker then rolls the transaction back)", async () => {
    const tx = fakeTransaction({
      respond: () => {
        throw Object.assign(new Error("duplicate key value violates unique constraint"), { code: "23505" });
      },
    });
    await assert.rejects(noteCreated.handle({ noteId: 5, text: "y" }, tx, fakeContext()), /duplicate key/);
  });
});
