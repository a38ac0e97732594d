import assert from "node:assert/strict";
import { SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { Attr, SpanName } from "../../src/telemetry/names.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";

const consumer = "credit";

describe("telemetry: inbox spans on PostgreSQL", function () {
  this.timeout(60_000);
  const telemetry = useTelemetryCapture();
  let url: string;
  let store: InboxStore;
  let noPreCheck: InboxStore;

  before(async () => {
    url = await createTestDatabase("telemetry_inbox");
    store = createPostgresInboxStore({ url, maxConnections: 4 });
    noPreCheck = createPostgresInboxStore({ url, maxConnections: 2, preCheck: false });
    await store.migrate();
    await store.process({ messageId: "setup", consumer }, async (tx) => {
      await tx.query(`CREATE TABLE "Account" ("Id" text PRIMARY KEY, "Balance" integer NOT NULL)`);
    });
  });
  after(async () => {
    await store?.close();
    await noPreCheck?.close();
  });

  /** Runs `fn` inside a parent span, as the worker's process span is, and returns the spans under it. */
  async function underParent(
    fn: () => Promise<unknown>,
  ): Promise<{ parent: ReadableSpan; children: ReadableSpan[] }> {
    await trace.getTracer("test").startActiveSpan("process credits", async (span) => {
      try {
        await fn();
      } finally {
        span.end();
      }
    });
    const spans = telemetry().spans();
    const parent = spans.find((s) => s.name === "process credits");
    assert.ok(parent);
    return { parent, children: spans.filter((s) => s !== parent) };
  }

  function only(spans: ReadableSpan[], predicate: (s: ReadableSpan) => boolean, what: string): ReadableSpan {
    const found = spans.filter(predicate);
    assert.equal(found.length, 1, `${what}: ${spans.map((s) => s.name).join(", ")}`);
    return found[0]!;
  }

  it("a committed transaction is a child span with each statement under it, marker first", async () => {
    const { parent, children } = await underParent(() =>
      store.process({ messageId: "m-commit", consumer }, async (tx) => {
        await tx.query(`INSERT INTO "Account" ("Id", "Balance") VALUES ($1, $2)`, ["a-1", 10]);
      }),
    );
    const txSpan = only(children, (s) => s.name === SpanName.inboxTransaction, "transaction span");
    assert.equal(txSpan.parentSpanContext?.spanId, parent.spanContext().spanId);
    assert.equal(txSpan.spanContext().traceId, parent.spanContext().traceId);
    assert.equal(txSpan.attributes[Attr.dbSystem], "postgresql");
    assert.equal(txSpan.attributes[Attr.outcome], "committed");
    assert.equal(txSpan.attributes[Attr.messageId], "m-commit");
    assert.equal(txSpan.status.code, SpanStatusCode.UNSET);

    const statements = children
      .filter((s) => s.parentSpanContext?.spanId === txSpan.spanContext().spanId)
      .sort((a, b) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1]);
    assert.deepEqual(
      statements.map((s) => s.name),
      ["SELECT Inbox", "BEGIN", "INSERT Inbox", "INSERT", "COMMIT"],
    );
    const marker = statements[2]!;
    assert.equal(marker.kind, SpanKind.CLIENT);
    assert.equal(marker.attributes[Attr.inboxStatement], "insertProcessedMarker");
    assert.equal(marker.attributes[Attr.dbOperation], "INSERT");
    assert.equal(marker.attributes[Attr.dbSystem], "postgresql");
    assert.equal(
      statements[3]!.attributes[Attr.dbQueryText],
      `INSERT INTO "Account" ("Id", "Balance") VALUES ($1, $2)`,
    );
  });

  it("a long statement built with literals (too long to keep its description) is described in full each time", async () => {
    const rows = Array.from({ length: 300 }, (_, i) => `('long-${i}', ${i})`).join(", ");
    const sql = `INSERT INTO "Account" ("Id", "Balance") VALUES ${rows}`;
    assert.ok(sql.length > 4096, `${sql.length} characters`);
    for (const messageId of ["m-long-1", "m-long-2"]) {
      const { children } = await underParent(() =>
        store.process({ messageId, consumer }, async (tx) => {
          if (messageId === "m-long-2") await tx.query(`DELETE FROM "Account" WHERE "Id" LIKE 'long-%'`);
          await tx.query(sql);
        }),
      );
      const insert = only(children, (s) => s.attributes[Attr.dbQueryText] === sql, "the long insert");
      assert.equal(insert.name, "INSERT");
      assert.equal(insert.attributes[Attr.dbOperation], "INSERT");
      assert.equal(insert.attributes[Attr.dbSystem], "postgresql");
      await telemetry().reset();
    }
  });

  it("by default a first delivery skips the pre-check read and a redelivery keeps it", async () => {
    const statementsOf = async (messageId: string, firstDelivery: boolean): Promise<string[]> => {
      await telemetry().reset();
      const { children } = await underParent(() =>
        store.process({ messageId, consumer }, () => Promise.resolve(), { firstDelivery }),
      );
      const txSpan = only(children, (s) => s.name === SpanName.inboxTransaction, "transaction span");
      return children
        .filter((s) => s.parentSpanContext?.spanId === txSpan.spanContext().spanId)
        .sort((a, b) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1])
        .map((s) => s.name);
    };
    assert.deepEqual(await statementsOf("m-first", true), ["BEGIN", "INSERT Inbox", "COMMIT"]);
    assert.deepEqual(
      await statementsOf("m-first", false),
      ["SELECT Inbox"],
      "a redelivery: one read, a duplicate",
    );
    // A first delivery whose marker exists (a resend past the duplicate window) meets the unique index instead.
    assert.deepEqual(await statementsOf("m-first", true), ["BEGIN", "INSERT Inbox", "ROLLBACK"]);
  });

  it("reads for first deliveries too while many of them have lately been duplicates, and stops again", async () => {
    const adaptive = createPostgresInboxStore({ url, maxConnections: 2 });
    try {
      const readFor = async (messageId: string): Promise<boolean> => {
        await telemetry().reset();
        await adaptive.process({ messageId, consumer }, () => Promise.resolve(), { firstDelivery: true });
        return telemetry()
          .spans()
          .some((s) => s.name === "SELECT Inbox");
      };
      assert.equal(await readFor("replayed-0"), false, "a first delivery: no read");
      // An upstream replays what was sent before: every first delivery now meets an existing marker.
      // Over half of the last ones duplicates (the share passes 0.5 at the 45th): read from then on.
      let reads = 0;
      for (let i = 0; i < 80; i += 1) if (await readFor("replayed-0")) reads += 1;
      // The share after n duplicates is 1 - (63/64)^n: over 0.5 from the 45th on, so the last 35 of 80 read.
      assert.ok(reads >= 34 && reads <= 36, `read for the later ones (${reads} of 80)`);
      assert.equal(await readFor("replayed-0"), true, "after 80 duplicates in a row: read");
      // Fresh first deliveries again: the share falls under 0.4 and the read stops, not at once.
      let fresh = 0;
      for (let i = 0; i < 120 && (await readFor(`fresh-${i}`)); i += 1) fresh += 1;
      // From about 0.72 it falls to 0.4 after 38 fresh ones (to 0.5, where a switch without a gap would stop, after 24).
      assert.ok(fresh >= 36 && fresh <= 40, `the read stopped after ${fresh} fresh ones`);
      assert.equal(await readFor("fresh-last"), false);
    } finally {
      await adaptive.close();
    }
  });

  it("a duplicate caught by the marker's unique index shows SQLSTATE 23505 on the insert", async () => {
    const key = { messageId: "m-dup", consumer };
    await noPreCheck.process(key, () => Promise.resolve());
    await telemetry().reset();
    const { children } = await underParent(() => noPreCheck.process(key, () => Promise.resolve()));
    const txSpan = only(children, (s) => s.name === SpanName.inboxTransaction, "transaction span");
    assert.equal(txSpan.attributes[Attr.outcome], "duplicate");
    assert.equal(txSpan.status.code, SpanStatusCode.UNSET);
    const marker = only(
      children,
      (s) => s.attributes[Attr.inboxStatement] === "insertProcessedMarker",
      "marker",
    );
    assert.equal(marker.attributes[Attr.dbStatusCode], "23505");
    assert.equal(marker.status.code, SpanStatusCode.ERROR);
    only(children, (s) => s.name === "ROLLBACK", "rollback");
  });

  it("a failed business change carries db.response.status_code and error.type on the transaction", async () => {
    const { children } = await underParent(() =>
      store.process({ messageId: "m-fail", consumer }, async (tx) => {
        await tx.query(`INSERT INTO "Account" ("Id", "Balance") VALUES ($1, $2)`, ["a-1", 5]);
      }),
    );
    const txSpan = only(children, (s) => s.name === SpanName.inboxTransaction, "transaction span");
    assert.equal(txSpan.attributes[Attr.outcome], "failed");
    assert.equal(txSpan.attributes[Attr.dbStatusCode], "23505");
    assert.equal(txSpan.attributes[Attr.errorType], "23505");
    assert.equal(txSpan.status.code, SpanStatusCode.ERROR);
    const business = only(children, (s) => s.name === "INSERT", "business insert");
    assert.equal(business.attributes[Attr.dbStatusCode], "23505");
  });

  it("a two-phase claim and its completion are spans of their own", async () => {
    const key = { messageId: "m-claim", consumer };
    const { children } = await underParent(async () => {
      const claim = await store.claim(key);
      assert.equal(claim.kind, "claimed");
      await store.markProcessed(key, claim.kind === "claimed" ? claim.claimId : undefined);
    });
    const claim = only(children, (s) => s.name === SpanName.inboxClaim, "claim");
    assert.equal(claim.attributes[Attr.outcome], "claimed");
    only(children, (s) => s.name === SpanName.inboxMarkProcessed, "mark processed");
    only(children, (s) => s.attributes[Attr.inboxStatement] === "insertOpenClaim", "claim insert");
  });

  it("an unreachable database fails the transaction span with the socket error and no status code", async () => {
    const closed = createPostgresInboxStore({ url: "postgres://nobody@127.0.0.1:9/none", maxConnections: 1 });
    try {
      const { children } = await underParent(() =>
        closed.process({ messageId: "m-down", consumer }, () => Promise.resolve()),
      );
      const txSpan = only(children, (s) => s.name === SpanName.inboxTransaction, "transaction span");
      assert.equal(txSpan.attributes[Attr.outcome], "failed");
      assert.equal(txSpan.attributes[Attr.errorType], "ECONNREFUSED");
      assert.equal(txSpan.attributes[Attr.dbStatusCode], undefined);
    } finally {
      await closed.close();
    }
  });
});
