import assert from "node:assert/strict";
import { createPostgresInboxStore } from "../../src/inbox/postgres/adapter.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createTestDatabase } from "../helpers/postgres.ts";

/**
 * What pg cannot send it raises as a plain Error without a code from inside the query, which from the driver could
 * only mean a lost connection (an outage): the store converts the parameters itself first, so such a statement is
 * the handler's TypeError, `permanent`, naming the statement and the parameter, and the connection is left as it was.
 */
describe("PostgreSQL store: a parameter pg cannot send is the handler's mistake, never an outage", function () {
  let store: InboxStore;
  before(async () => {
    store = createPostgresInboxStore({ url: await createTestDatabase("pg_parameters"), maxConnections: 1 });
    await store.migrate();
  });
  after(() => store?.close());

  const cases: [string, unknown][] = [
    ["parameters that are not an array", "not an array"],
    [
      "a toPostgres that throws",
      [
        {
          toPostgres: () => {
            throw new Error("cannot say");
          },
        },
      ],
    ],
    [
      "a toPostgres that returns itself",
      [
        (() => {
          const o = { toPostgres: () => o };
          return o;
        })(),
      ],
    ],
    [
      "a toJSON that throws",
      [
        {
          toJSON: () => {
            throw new Error("no JSON");
          },
        },
      ],
    ],
  ];
  for (const [what, params] of cases) {
    it(`${what}: permanent TypeError naming the statement; the one connection then commits the next message`, async () => {
      const outcome = await store.process({ messageId: `bad-${what}`, consumer: "c" }, async (tx) => {
        await tx.query("SELECT $1::text AS v", params as unknown[]);
      });
      assert.equal(outcome.kind, "failed");
      if (outcome.kind !== "failed") return;
      assert.equal(outcome.errorClass, "permanent");
      assert.ok(outcome.error instanceof TypeError, String(outcome.error));
      assert.match(outcome.error.message, /"SELECT \$1::text AS v"/);
      const next = await store.process({ messageId: `good-${what}`, consumer: "c" }, async (tx) => {
        await tx.query("SELECT $1::text AS v", ["fine"]);
      });
      assert.equal(next.kind, "committed");
    });
  }
});
