import assert from "node:assert/strict";
import { startApp, type App } from "../../src/app/app.ts";
import { loadConfig } from "../../src/config/load.ts";
import { Metric } from "../../src/telemetry/names.ts";
import { silentLogger } from "../../src/telemetry/logger.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";
import { exampleDatabase } from "../helpers/worker.ts";

const QUEUE = "ready-gauge";

describe("the app reports sbinbox.ready with /readyz's answer (what the 'not ready anywhere' alert reads)", function () {
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: {} }));
  const capture = useTelemetryCapture();
  let app: App | undefined;

  after(async () => {
    await app?.stop();
  });

  async function readyPoints(): Promise<number[]> {
    const data = (await capture().collect()).find((m) => m.descriptor.name === Metric.ready);
    return (data?.dataPoints ?? []).map((p) => p.value as number);
  }

  it("reports 1 once /readyz answers 200, and nothing after the app stops", async function () {
    const db = await exampleDatabase("ready_gauge");
    await db.close();
    const config = loadConfig({
      env: {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_POSTGRES_URL: db.url,
        SBINBOX_QUEUE: QUEUE,
        PORT: "0",
        SBINBOX_HTTP_HOST: "127.0.0.1",
      },
    });
    app = await startApp(config, { logger: silentLogger });
    const port = app.httpPort;
    let status = 0;
    // Start-up waits for the broker and the database; under load that takes seconds.
    for (const deadline = Date.now() + 30_000; status !== 200 && Date.now() < deadline;) {
      status = (await fetch(`http://127.0.0.1:${port}/readyz`)).status;
      if (status !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(status, 200);
    assert.deepEqual(await readyPoints(), [1]);
    await app.stop();
    app = undefined;
    assert.deepEqual(await readyPoints(), [], "a stopped app reports nothing");
  });
});
