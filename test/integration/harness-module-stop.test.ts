/**
 * A module's own resources and a two-phase handler's record of its result (docs/handlers.md, "A two-phase
 * handler's result" and "A module's stop"). The handler calls a payment API that dedupes by the idempotency key,
 * then records the charge in its own table through a pool of the module's own, keyed by the MessageId, so a retry
 * that performs again records nothing twice. The module's `stop` ends that pool: the harness calls it after the
 * worker stops and before its PostgreSQL stops, so the pool never meets the server's shutdown ("terminating
 * connection due to administrator command", which a pool with no error listener raises as an uncaught exception).
 * A module without `stop` is shown meeting it.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { z } from "zod";
import type { HandlerModule, TwoPhaseHandler } from "../../src/index.ts";
import { startHarness, type Harness } from "../../src/testing/index.ts";
import { waitUntil } from "../helpers/broker.ts";

/** A payment API with idempotency keys: a repeated key returns the first charge and charges nothing. */
class PaymentApi {
  readonly charges = new Map<string, string>();
  calls = 0;
  charge(amount: number, idempotencyKey: string): Promise<string> {
    this.calls += 1;
    if (!this.charges.has(idempotencyKey))
      this.charges.set(idempotencyKey, `ch_${this.charges.size + 1}_${amount}`);
    return Promise.resolve(this.charges.get(idempotencyKey)!);
  }
}

/** A receipts module with a pool of its own, opened on first use; `withStop` says whether it exports stop. */
function receiptsModule(migrations: string, withStop: boolean) {
  const api = new PaymentApi();
  const state = {
    url: "",
    pool: undefined as pg.Pool | undefined,
    poolErrors: [] as Error[],
    stops: 0,
    /** The worker's status when stop was called. */
    workerAtStop: "",
    worker: undefined as { readiness(): Promise<{ status: string }> } | undefined,
    failNextRecord: false,
  };
  const pool = () => {
    if (!state.pool) {
      // Idle connections stay open, as a busy module's would at shutdown.
      state.pool = new pg.Pool({ connectionString: state.url, max: 2, idleTimeoutMillis: 0 });
      // Counted here; without a listener the same error would be an uncaught exception.
      state.pool.on("error", (error) => state.poolErrors.push(error));
    }
    return state.pool;
  };
  const paymentRequested: TwoPhaseHandler<{ orderId: number; amount: number }> = {
    kind: "two-phase",
    type: "PaymentRequested",
    schema: z.object({ orderId: z.number().int().positive(), amount: z.number().int().positive() }),
    async perform(body, context) {
      const chargeId = await api.charge(body.amount, context.idempotencyKey);
      if (state.failNextRecord) {
        state.failNextRecord = false;
        throw new Error("the receipt's write failed after the charge");
      }
      // Keyed by the MessageId: a retry that performs again (the API answers with the same charge) writes nothing.
      await pool().query(
        "INSERT INTO receipts (message_id, order_id, charge_id) VALUES ($1, $2, $3) ON CONFLICT (message_id) DO NOTHING",
        [context.idempotencyKey, body.orderId, chargeId],
      );
    },
  };
  const module: HandlerModule = {
    name: "receipts",
    handlers: () => [paymentRequested],
    migrations: { postgres: migrations },
    ...(withStop
      ? {
          async stop() {
            state.stops += 1;
            state.workerAtStop = (await state.worker!.readiness()).status;
            await state.pool?.end();
          },
        }
      : {}),
  };
  return { module, api, state };
}

describe("a module's own pool and a two-phase handler's recorded result, through the harness", function () {
  this.timeout(60_000);
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-module-stop-"));
    await mkdir(join(dir, "postgres"));
    await writeFile(
      join(dir, "postgres", "0001_receipts.sql"),
      "CREATE TABLE receipts (message_id varchar(128) PRIMARY KEY, order_id bigint NOT NULL, charge_id text NOT NULL);",
    );
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  describe("with stop", () => {
    let harness: Harness | undefined;
    const receipts = () => receiptsModule(join(dir, "postgres"), true);
    let made: ReturnType<typeof receipts>;
    before(async () => {
      made = receipts();
      harness = await startHarness({ module: made.module });
      made.state.url = harness.postgresUrl;
      made.state.worker = harness.worker;
    });
    after(async () => {
      await harness?.stop();
    });

    it("records the charge once, also when the record failed after the call and perform ran again", async () => {
      made.state.failNextRecord = true;
      const id = await harness!.publish("PaymentRequested", "order-1", { orderId: 1, amount: 250 });
      const outcome = await harness!.outcome(id);
      assert.equal(outcome.status, "committed");
      assert.equal(outcome.retries.length, 1, "one failed attempt, retried");
      assert.equal(made.api.calls, 2, "performed twice");
      assert.equal(made.api.charges.size, 1, "charged once: the API deduped the key");
      const { rows } = await harness!.db.query("SELECT message_id, order_id, charge_id FROM receipts");
      assert.deepEqual(rows, [{ message_id: id, order_id: "1", charge_id: "ch_1_250" }]);
    });

    it("stop calls the module's stop once, after the worker, and its pool meets no shutdown", async () => {
      assert.ok(made.state.pool && made.state.pool.idleCount > 0, "the module's pool holds idle connections");
      const pool = made.state.pool;
      await harness!.stop();
      await harness!.stop();
      assert.equal(made.state.stops, 1);
      assert.equal(made.state.workerAtStop, "stopping", "the worker had stopped receiving and handling");
      assert.equal(pool.ended, true);
      assert.deepEqual(made.state.poolErrors, []);
    });
  });

  it("without stop, the module's pool meets the PostgreSQL shutdown (the error the hook avoids)", async () => {
    const made = receiptsModule(join(dir, "postgres"), false);
    const harness = await startHarness({ module: made.module });
    made.state.url = harness.postgresUrl;
    try {
      const id = await harness.publish("PaymentRequested", "order-2", { orderId: 2, amount: 10 });
      assert.equal((await harness.outcome(id)).status, "committed");
    } finally {
      await harness.stop();
    }
    await waitUntil(
      () => made.state.poolErrors.length > 0,
      "the pool's idle connection is terminated",
      10_000,
    );
    assert.match(made.state.poolErrors[0]!.message, /terminating connection due to administrator command/);
    await made.state.pool!.end();
  });
});
