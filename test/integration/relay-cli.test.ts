import assert from "node:assert/strict";
import { runCli } from "../helpers/cli.ts";

const BASE = {
  SBINBOX_SERVICEBUS_CONNECTION_STRING: "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v",
  SBINBOX_POSTGRES_URL: "postgres://u:p@127.0.0.1:1/db",
};

describe("sbinbox relay: configuration", function () {
  it("refuses a lease that could let a resend arrive after the duplicate-detection window, naming the settings", async function () {
    const result = await runCli(["relay"], { ...BASE, SBINBOX_OUTBOX_LEASE_MS: "400000" });
    assert.equal(result.code, 2, result.stderr);
    assert.match(
      result.stderr,
      /configuration error: .*SBINBOX_OUTBOX_LEASE_MS.*SBINBOX_QUEUE_DUPLICATE_WINDOW_MS/,
    );
  });

  it("refuses a send timeout that is not shorter than the lease, naming both", async function () {
    const result = await runCli(["relay"], {
      ...BASE,
      SBINBOX_OUTBOX_LEASE_MS: "20000",
      SBINBOX_OUTBOX_SEND_TIMEOUT_MS: "20000",
    });
    assert.equal(result.code, 2, result.stderr);
    assert.match(
      result.stderr,
      /configuration error: .*SBINBOX_OUTBOX_SEND_TIMEOUT_MS, SBINBOX_OUTBOX_LEASE_MS/,
    );
  });

  it("refuses a window below Azure's 20 s, and a start without Service Bus or database", async function () {
    const small = await runCli(["relay"], { ...BASE, SBINBOX_QUEUE_DUPLICATE_WINDOW_MS: "5000" });
    assert.equal(small.code, 2);
    assert.match(small.stderr, /SBINBOX_QUEUE_DUPLICATE_WINDOW_MS: must be at least 20000/);
    const noBus = await runCli(["relay"], { SBINBOX_POSTGRES_URL: BASE.SBINBOX_POSTGRES_URL });
    assert.equal(noBus.code, 2);
    assert.match(noBus.stderr, /SBINBOX_SERVICEBUS_CONNECTION_STRING/);
    const noDb = await runCli(["relay"], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: BASE.SBINBOX_SERVICEBUS_CONNECTION_STRING,
    });
    assert.equal(noDb.code, 2);
    assert.match(noDb.stderr, /SBINBOX_DATABASE/);
  });
});
