import assert from "node:assert/strict";
import type { Database } from "../../src/app/database.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { runCli } from "../helpers/cli.ts";
import { exampleDatabase } from "../helpers/worker.ts";

/**
 * `sbinbox worker` of the wrong kind for its entity: session mode on a queue without sessions, or a plain worker on
 * a session-enabled one. Either is refused by the broker when the worker's receive link attaches; start-up turns
 * that into one configuration error naming the setting and the entity, and exit code 2. The message waiting in the
 * queue is left as it was.
 */
describe("sbinbox worker on an entity of the other kind (local broker, PostgreSQL)", function () {
  this.timeout(60_000);
  const fixture = useLocalBroker(brokerConfig({ plain: {}, ordered: { RequiresSession: true } }));
  let db: Database & { url: string };
  before(async () => {
    db = await exampleDatabase("worker_session_mismatch");
  });
  after(async () => {
    await db.close();
  });

  const env = (queue: string, sessions: string) => ({
    SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
    SBINBOX_POSTGRES_URL: db.url,
    SBINBOX_QUEUE: queue,
    SBINBOX_MAX_CONCURRENT_SESSIONS: sessions,
    PORT: "0",
    SBINBOX_HTTP_HOST: "127.0.0.1",
    SBINBOX_LOG_LEVEL: "error",
  });

  async function untouched(queue: string, sessionId?: string): Promise<void> {
    const receiver = sessionId
      ? await fixture.client.acceptSession(queue, sessionId)
      : fixture.client.createReceiver(queue);
    try {
      const [m] = await receiver.peekMessages(1);
      assert.equal(m?.messageId, `${queue}-waiting`, "the waiting message is still there");
      assert.equal(m?.deliveryCount, 0, "and was never delivered");
    } finally {
      await receiver.close();
    }
  }

  /** The stderr lines that are not JSON log records; the log has the one error record beside them, no more. */
  function plainLines(stderr: string): string[] {
    const all = stderr.trim().split("\n");
    const logged = all.filter((l) => l.startsWith("{"));
    assert.ok(logged.length <= 1, `one logged error at most: ${stderr}`);
    const plain = all.filter((l) => !l.startsWith("{"));
    assert.equal(plain.length, 1, stderr);
    return plain;
  }

  it("session mode (SBINBOX_MAX_CONCURRENT_SESSIONS 4) on a queue without sessions: one error, exit 2", async function () {
    const sender = fixture.client.createSender("plain");
    await sender.sendMessages({ messageId: "plain-waiting", body: {} });
    await sender.close();
    const result = await runCli(["worker"], env("plain", "4"));
    assert.equal(result.code, 2, result.stderr);
    const lines = plainLines(result.stderr);
    assert.match(
      lines[0]!,
      /^sbinbox worker: configuration error: SBINBOX_MAX_CONCURRENT_SESSIONS: 4, but 'plain' is not session-enabled \(RequiresSession false\): set it to 0/,
    );
    await untouched("plain");
  });

  it("a plain worker (SBINBOX_MAX_CONCURRENT_SESSIONS 0) on a session-enabled queue: one error, exit 2", async function () {
    const sender = fixture.client.createSender("ordered");
    await sender.sendMessages({ messageId: "ordered-waiting", sessionId: "s1", body: {} });
    await sender.close();
    const result = await runCli(["worker"], env("ordered", "0"));
    assert.equal(result.code, 2, result.stderr);
    const lines = plainLines(result.stderr);
    assert.match(
      lines[0]!,
      /^sbinbox worker: configuration error: SBINBOX_MAX_CONCURRENT_SESSIONS: 0, but 'ordered' requires sessions \(RequiresSession true\): set it above 0/,
    );
    await untouched("ordered", "s1");
  });
});
