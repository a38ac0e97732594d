import assert from "node:assert/strict";
import { LocalBroker } from "../../src/localbroker/broker.ts";
import { waitUntil } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";
import { demoEvent } from "../../src/example/demo-events.ts";
import { createPublisher, type PublishFailure } from "../../src/servicebus/publisher.ts";

const QUEUE = "sbinbox";

/**
 * The broker going away while several batches are in flight. The SDK's sender leaves a delivery whose connection
 * dropped unsettled, and rhea-promise 3.0.3's send timer then reads the closed link's address and throws out of a
 * timer (amqp/rhea-promise#109): an uncaught exception, about a minute later, with no report of what was sent.
 */
describe("sbinbox publish when the broker goes down mid-send", function () {
  this.timeout(60_000);

  it("--in-flight 4: exits 1 promptly, naming how many events the broker acknowledged", async function () {
    const broker = await LocalBroker.start({ port: 0, host: "127.0.0.1" });
    let stopped = false;
    try {
      const { done } = startCli(["publish", "--count", "200000", "--in-flight", "4"], {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: broker.connectionString,
      });
      await waitUntil(() => broker.counts(QUEUE).active > 0, "the first batch arrived", 30_000);
      const started = Date.now();
      await broker.stop();
      stopped = true;
      const result = await done;
      const onQueue = broker.counts(QUEUE).active;
      assert.equal(result.code, 1, result.stderr);
      assert.doesNotMatch(result.stderr, /TypeError|Uncaught|at .*\.js:\d+/);
      // The broker may have stored a batch whose acknowledgement the dropped connection lost: those are counted
      // apart, so what it holds lies between the acknowledged and that plus the unconfirmed.
      const match =
        /failed after (\d+) events acknowledged(?: \(up to (\d+) more were sent unacknowledged)?/.exec(
          result.stderr,
        );
      assert.ok(match, result.stderr);
      const [acknowledged, unconfirmed] = [Number(match[1]), Number(match[2] ?? 0)];
      assert.ok(acknowledged > 0, result.stderr);
      assert.ok(
        acknowledged <= onQueue && onQueue <= acknowledged + unconfirmed,
        `the broker holds ${onQueue}: ${result.stderr}`,
      );
      assert.ok(Date.now() - started < 20_000, `took ${Date.now() - started} ms`);
    } finally {
      if (!stopped) await broker.stop();
    }
  });

  it("publishAll in this process, 4 in flight: rejects promptly with the counts, nothing thrown from a timer", async function () {
    const broker = await LocalBroker.start({ port: 0, host: "127.0.0.1" });
    const publisher = createPublisher({
      queue: QUEUE,
      maxInFlight: 4,
      connection: { connectionString: broker.connectionString },
    });
    try {
      let acknowledged = 0;
      const stopped = (async () => {
        await waitUntil(() => acknowledged > 0, "a batch was acknowledged", 30_000);
        await broker.stop();
        return Date.now();
      })();
      const error = await publisher
        .publishAll(
          (function* () {
            for (let i = 0; i < 200_000; i++) yield demoEvent("down", i);
          })(),
          { onSent: (n) => (acknowledged += n) },
        )
        .then(
          () => assert.fail("published everything though the broker stopped"),
          (e: Error & PublishFailure) => e,
        );
      const took = Date.now() - (await stopped);
      const onQueue = broker.counts(QUEUE).active;
      assert.equal(error.acknowledged, acknowledged);
      assert.ok(
        error.acknowledged <= onQueue && onQueue <= error.acknowledged + error.unconfirmed,
        `acknowledged ${error.acknowledged}, unconfirmed ${error.unconfirmed}, on the broker ${onQueue}`,
      );
      assert.ok(took < 20_000, `took ${took} ms`);
    } finally {
      await publisher.close();
    }
  });

  it("publishBatch of one event, the broker gone: the error counts it as sent and unconfirmed", async function () {
    const broker = await LocalBroker.start({ port: 0, host: "127.0.0.1" });
    const publisher = createPublisher({
      queue: QUEUE,
      resendAttempts: 0,
      connection: { connectionString: broker.connectionString },
    });
    try {
      // The link is open and its size limit read, so the call gets past its checks to the send.
      await publisher.publishBatch([demoEvent("alone", 0)]);
      await broker.stop();
      const error = await publisher.publishBatch([demoEvent("alone", 1)]).then(
        () => assert.fail("published though the broker stopped"),
        (e: Error & Partial<PublishFailure>) => e,
      );
      assert.deepEqual(
        [error.acknowledged, error.acknowledgedPrefix, error.unconfirmed],
        [0, 0, 1],
        `${error.name}: ${error.message}`,
      );
    } finally {
      await publisher.close();
    }
  });
});
