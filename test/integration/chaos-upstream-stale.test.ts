import assert from "node:assert/strict";
import pg from "pg";
import { withoutSbinboxSettings } from "../../src/app/demo-workers.ts";
import { startUpstream, type Upstream } from "../../src/app/demo-upstream.ts";
import { startLocalStack } from "../../src/app/local-stack.ts";
import { createPostgresOutboxStore } from "../../src/outbox/postgres/store.ts";

// The chaos run ends at once when only stale outbox rows are left and names them (upstream_stale): its reading of
// "stale" must be the relay's, on the real outbox after a real claim, or it would name rows a relay still sends.
describe("the chaos run's upstream: stale outbox rows", function () {
  this.timeout(120_000);
  const cleanups: (() => Promise<void>)[] = [];
  let upstream: Upstream;
  let pool: pg.Pool;

  before(async function () {
    const stack = await startLocalStack(
      {
        queue: { name: "stale", duplicateDetectionWindowMs: 20_000 },
        database: "sbinbox_stale",
        maxConnections: 2,
      },
      cleanups,
    );
    upstream = await startUpstream(stack, {
      runId: "stale",
      rollbackEvery: 1_000,
      env: withoutSbinboxSettings(process.env),
    });
    cleanups.push(() => upstream.close());
    // The upstream database startUpstream made (createDatabase would drop it again).
    pool = new pg.Pool({ connectionString: stack.postgres.url("sbinbox_upstream") });
    cleanups.push(() => pool.end());
  });

  after(async function () {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });

  it("names the rows a relay claimed and never marked once their first try is past the window, as the relay counts them", async function () {
    await upstream.run(4);
    const store = createPostgresOutboxStore({ pool });
    // A relay that claims two rows and dies before its send (SIGKILL): FirstAttemptUtc set, nothing marked.
    const claimed = await store.claim(2, 60_000, 60_000);
    assert.equal(claimed.length, 2);
    // Then one more is claimed and sent: not stale, whatever its age.
    const [sent] = await store.claim(1, 60_000, 60_000);
    await store.markSent([sent!.id]);
    const windowMs = 300;
    let stale = await upstream.stale(windowMs);
    assert.deepEqual(stale, [], "inside the window nothing is stale");
    // The window runs out (wall clock on the database's side): look until it has.
    const deadline = Date.now() + 10_000;
    while (stale.length < 2 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      stale = await upstream.stale(windowMs);
    }
    assert.deepEqual(
      stale.map((r) => r.messageId),
      claimed.map((r) => r.messageId),
    );
    assert.ok(stale.every((r) => r.attempts === 1 && r.firstTriedAgoMs >= windowMs));
    // The relay's own status (the sbinbox.outbox.stale gauge) counts the same rows; the never-tried row is unsent,
    // not stale, so the run keeps waiting for it.
    const status = await store.status(windowMs);
    assert.equal(status.stale, stale.length);
    assert.equal(await upstream.unsent(), 3);
  });
});
