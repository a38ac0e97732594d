import assert from "node:assert/strict";
import { startApp, type App } from "../../src/app/app.ts";
import { loadConfig } from "../../src/config/load.ts";
import { freePort } from "../../src/embedded/free-port.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { useLocalBroker } from "../helpers/broker.ts";
import { getJson, waitUntilAsync } from "../helpers/http.ts";
import { createTestDatabase } from "../helpers/postgres.ts";
import { exampleDatabase } from "../helpers/worker.ts";

/**
 * SBINBOX_BENCH_LAYERS_OFF switches safety behaviours off for the CPU ledger (docs/benchmark.md): a worker started
 * with it says so at a level every SBINBOX_LOG_LEVEL shows, and on /readyz.
 */
describe("worker with SBINBOX_BENCH_LAYERS_OFF", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker();
  let app: App | undefined;
  after(async () => {
    await app?.stop();
  });

  it("logs an error even at SBINBOX_LOG_LEVEL=error and shows the layers on /readyz", async () => {
    const url = await createTestDatabase("bench_layers_off");
    await (await exampleDatabase("", url)).close();
    const port = await freePort();
    const config = loadConfig({
      env: {
        SBINBOX_QUEUE: "sbinbox",
        PORT: String(port),
        SBINBOX_HTTP_HOST: "127.0.0.1",
        SBINBOX_SWEEP_INTERVAL_MS: "0",
        SBINBOX_LOG_LEVEL: "error",
        SBINBOX_BENCH_LAYERS_OFF: "settlement-guard,progress",
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_POSTGRES_URL: url,
      },
    });
    const lines: string[] = [];
    app = await startApp(config, {
      logger: createLogger({ level: config.logLevel, write: (l) => lines.push(l) }),
    });
    const warning = lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.off !== undefined);
    assert.ok(warning, lines.join("\n"));
    assert.equal(warning.level, "error");
    assert.match(String(warning.msg), /SBINBOX_BENCH_LAYERS_OFF is set/);
    await waitUntilAsync(async () => (await getJson(port, "/readyz"))?.status === 200, "readyz 200", 20_000);
    const readyz = await getJson(port, "/readyz");
    assert.equal(readyz?.body.benchLayersOff, "progress-settlement-guard");
  });
});
