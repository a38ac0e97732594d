import assert from "node:assert/strict";
import type { Backend } from "./backends.ts";
import { scalar } from "./backends.ts";
import { CONSUMER, insertBacklog } from "./cleanup-pace-suite.ts";
import { disposingAfter } from "./guards.ts";
import { cleanupPass } from "../../src/worker/cleanup-pass.ts";
import { capturedLogs } from "../helpers/logs.ts";

const RETENTION_MS = 3_600_000;
const BACKLOG = 3000;

/**
 * One retention pass per inbox at a time (every instance runs passes, each paced to the whole table's insert
 * rate): two stores, as two instances, pass at once on the real database; the one that finds the cleanup lock
 * held deletes nothing and says so, and the lock is free again once the first pass ends.
 */
export function cleanupLockConformance(backend: Backend): void {
  describe(`conformance cleanup lock: ${backend.name}`, function () {
    this.timeout(60_000);

    it("two instances pass at once: one deletes the whole backlog, the other deletes 0 and logs the skip", async function () {
      const db = await backend.database(`lock_${backend.dialect}`);
      await disposingAfter(db, async () => {
        const first = db.createStore({ preCheck: false });
        const second = db.createStore({ preCheck: false });
        await first.migrate();
        await db.raw.query(db.raw.statements.registerConsumer, [CONSUMER]);
        await insertBacklog(db, BACKLOG);
        const logs = capturedLogs();

        // The first pass spaced out (batches of 100, 20 ms apart), so it is under way when the second asks.
        let batches = 0;
        let started!: () => void;
        const underWay = new Promise<void>((resolve) => (started = resolve));
        const firstPass = first.cleanup(RETENTION_MS, 100, {
          pauseMs: 20,
          onBatch: () => {
            batches += 1;
            started();
          },
        });
        await underWay;
        const skipped = await cleanupPass(second, RETENTION_MS, logs.logger, { batchRows: 100 });
        const batchesWhenSkipped = batches;
        const deleted = await firstPass;

        assert.equal(skipped, 0, "the second instance deletes nothing while the first holds the lock");
        assert.ok(batchesWhenSkipped < BACKLOG / 100, `asked mid-pass (after ${batchesWhenSkipped} batches)`);
        assert.equal(deleted, BACKLOG, "the first deletes the whole backlog alone");
        const line = logs.lines.find((l) => l.msg === "inbox cleanup pass");
        assert.ok(line, JSON.stringify(logs.lines));
        assert.equal(line.skipped, "another instance holds the cleanup lock");
        assert.equal(line.deleted, 0);
        assert.equal(line.batches, 0);
        assert.equal(await scalar(db.raw, db.sql.countAllMarkers), 0);

        // The first pass gave the lock back: the second now passes (nothing left to delete) without a skip.
        await insertBacklog(db, 10);
        const after = capturedLogs();
        assert.equal(await cleanupPass(second, RETENTION_MS, after.logger, { batchRows: 100 }), 10);
        const again = after.lines.find((l) => l.msg === "inbox cleanup pass");
        assert.equal(again?.skipped, undefined, JSON.stringify(again));
      });
    });
  });
}
