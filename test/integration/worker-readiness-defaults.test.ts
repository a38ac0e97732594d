import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { PROGRESS_DEFAULTS } from "../../src/worker/progress.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { capturedLogs } from "../helpers/logs.ts";
import { StallProxy } from "../helpers/stall-proxy.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

/** Polls the worker's readiness until `ok` holds for it; the readiness call itself paces the loop. */
async function readinessUntil(
  worker: Worker,
  ok: (r: Awaited<ReturnType<Worker["readiness"]>>) => boolean,
  what: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok(await worker.readiness())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The outside fault test's silent link. */
const STALL_MS = 30_000;
/** After the link answers again, ready within the recovery time and a loaded machine's few seconds. */
const READY_AFTER_MS = PROGRESS_DEFAULTS.recoverAfterMs + 5_000;

describe("worker: readiness on the shipped progress defaults through a 30 s silent link (about 45 s)", function () {
  const fixture = useLocalBroker(brokerConfig({ sbinbox: { LockDuration: "PT30S" } }));
  let db: Database;
  let proxy: StallProxy;
  let proxied: ServiceBusClient;
  let worker: Worker | undefined;

  before(async () => {
    db = await exampleDatabase("readiness_defaults");
    proxy = await StallProxy.start(fixture.broker.port);
    proxied = new ServiceBusClient(
      fixture.broker.connectionString.replace(
        `sb://localhost:${fixture.broker.port};`,
        `sb://127.0.0.1:${proxy.port};`,
      ),
    );
  });
  after(async () => {
    proxy.resume();
    await worker?.stop();
    await proxied.close();
    await proxy.close();
    await db.close();
  });

  it("stays ready on the idle queue, turns silent during the stall, and ready again within seconds after", async function () {
    this.timeout(120_000);
    const logs = capturedLogs();
    const w = (worker = startTestWorker({ client: proxied, db, logger: logs.logger }));
    await readinessUntil(w, (r) => r.ready, "the worker is ready", 20_000);
    // Idle past the quiet time and the silence threshold: the peeks are answered, readiness does not flap.
    const idleUntil = Date.now() + PROGRESS_DEFAULTS.silentAfterMs + 2_000;
    while (Date.now() < idleUntil) {
      assert.equal((await w.readiness()).serviceBus, "ok", "an idle queue's link stays ok");
      await new Promise((resolve) => setTimeout(resolve, 500));
    }

    const stalledAt = Date.now();
    proxy.stall();
    await readinessUntil(w, (r) => r.serviceBus === "silent", "silent during the stall", STALL_MS);
    const turnedMs = Date.now() - stalledAt;
    assert.equal((await w.readiness()).ready, false);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, stalledAt + STALL_MS - Date.now())));
    assert.equal((await w.readiness()).serviceBus, "silent", "still silent at the stall's end");

    const resumedAt = Date.now();
    proxy.resume();
    await readinessUntil(w, (r) => r.ready, "ready again after the link answers", READY_AFTER_MS);
    const readyMs = Date.now() - resumedAt;
    console.log(`      silent ${turnedMs} ms into the stall; ready ${readyMs} ms after it ended`);
    assert.ok(turnedMs <= PROGRESS_DEFAULTS.silentAfterMs + 5_000, `silent after ${turnedMs} ms`);
    assert.ok(
      logs.lines.some((l) => String(l.msg).startsWith("Service Bus answers again")),
      "the recovery is logged",
    );
  });
});
