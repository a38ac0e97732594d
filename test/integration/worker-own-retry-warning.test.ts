import assert from "node:assert/strict";
import { ServiceBusClient, type ServiceBusClientOptions } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import { OWN_RETRY } from "../../src/servicebus/throttling.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "sbinbox";

/**
 * A client given to createWorker that retries inside the SDK hides ServerBusy from the worker, so each throttled
 * settlement costs a delivery: the worker says so at start, reading the retry options off the real SDK client.
 */
describe("worker: warns at start when its client is not OWN_RETRY", function () {
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { RequiresDuplicateDetection: true } }));
  let db: Database;
  before(async () => {
    db = await exampleDatabase("own-retry-warning");
  });
  after(async () => {
    await db?.close();
  });

  const cases: [string, ServiceBusClientOptions, RegExp | undefined][] = [
    ["the SDK's default", {}, /retryOptions\.maxRetries is 3, not 0: .*OWN_RETRY/],
    ["maxRetries 5", { retryOptions: { maxRetries: 5 } }, /retryOptions\.maxRetries is 5, not 0/],
    ["OWN_RETRY", { retryOptions: OWN_RETRY }, undefined],
  ];
  for (const [name, clientOptions, expected] of cases)
    it(`${name}: ${expected ? "one warning" : "no warning"}`, async function () {
      type Line = { level: string; msg: string; queue?: string };
      const lines: Line[] = [];
      const client = new ServiceBusClient(fixture.broker.connectionString, clientOptions);
      const worker = startTestWorker({
        client,
        db,
        logger: createLogger({ level: "warn", write: (line) => lines.push(JSON.parse(line) as Line) }),
      });
      try {
        const warnings = lines.filter((l) => l.level === "warn" && /OWN_RETRY/.test(l.msg));
        if (expected === undefined) assert.deepEqual(warnings, []);
        else {
          assert.equal(warnings.length, 1, JSON.stringify(lines));
          assert.match(warnings[0]!.msg, expected);
          assert.equal(warnings[0]!.queue, QUEUE);
        }
      } finally {
        await worker.stop();
        await client.close();
      }
    });
});
