import assert from "node:assert/strict";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import { DoNotRetryError } from "../../src/domain/errors.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { accountSql } from "../../src/example/index.ts";
import { defaultConfig, queueDefaults } from "../../src/localbroker/config.ts";
import { DEFAULT_RULE } from "../../src/localbroker/rules.ts";
import { serviceTopic } from "../../src/localbroker/service-topic.ts";
import { replayDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { createPublisher } from "../../src/servicebus/publisher.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { defaultRetryPolicy } from "../../src/worker/retry-policy.ts";
import { useLocalBroker, waitUntil } from "../helpers/broker.ts";
import {
  creditsPerMessage,
  exampleDatabase,
  startTestWorker,
  type TestWorkerOptions,
} from "../helpers/worker.ts";

const TOPIC = "accounts";
/** Another team's subscription on the same topic: the default true filter, nothing excluded, nobody receiving. */
const FOREIGN = `${TOPIC}/Subscriptions/audit`;
/** A partner's topic without duplicate detection, whose billing subscription forwards to billing's queue too. */
const PARTNER = "partner-events";

const config = defaultConfig();
const { topic, queues } = serviceTopic(TOPIC, ["billing", "ledger"], {
  lockDurationMs: 5_000,
  maxDeliveryCount: 3,
});
topic.subscriptions.push({
  name: "audit",
  queue: { ...queueDefaults, name: FOREIGN, requiresDuplicateDetection: false },
  rules: [DEFAULT_RULE],
});
const partner = serviceTopic(PARTNER, ["billing"]).topic;
partner.requiresDuplicateDetection = false;
config.queues = queues;
config.topics = [topic, partner];

const body = (json: unknown) => Buffer.from(JSON.stringify(json));

const credit = (amount: number, messageId: string) => [messageId, "acct", amount] as [string, string, number];

describe("workers on a topic through forwarding: each service's subscription forwards to its own queue", function () {
  const fixture = useLocalBroker(config);
  let billingDb: Database;
  let ledgerDb: Database;
  before(async () => {
    billingDb = await exampleDatabase("fwd_billing");
    ledgerDb = await exampleDatabase("fwd_ledger");
  });
  after(async () => {
    await billingDb.close();
    await ledgerDb.close();
  });

  const foreignCount = () => fixture.broker.counts(FOREIGN).active;
  /** A service's worker on its own queue, its consumer named as it. */
  const service = (name: "billing" | "ledger", extra: Partial<TestWorkerOptions> = {}) =>
    startTestWorker({
      client: fixture.client,
      db: name === "billing" ? billingDb : ledgerDb,
      queue: name,
      consumer: name,
      ...extra,
    });

  it("two services, two queues, two databases: every event applied once in each; resends dropped at the topic", async function () {
    const publisher = createPublisher({
      queue: TOPIC,
      connection: { connectionString: fixture.broker.connectionString },
    });
    const events = Array.from({ length: 40 }, (_, i) => i);
    try {
      for (const i of events)
        await publisher.publish("AccountCredited", `f-${i}`, { accountId: `acct-${i % 5}`, amount: 1 + i });
      for (const i of events.slice(0, 10))
        await publisher.publish("AccountCredited", `f-${i}`, { accountId: `acct-${i % 5}`, amount: 1 + i });
    } finally {
      await publisher.close();
    }
    const billing = service("billing");
    const ledger = service("ledger");
    try {
      await waitUntil(
        () => billing.stats.committed === 40 && ledger.stats.committed === 40,
        "both apply all 40",
        30_000,
      );
    } finally {
      await billing.stop();
      await ledger.stop();
    }
    for (const db of [billingDb, ledgerDb]) {
      const credits = await creditsPerMessage(db);
      assert.equal(credits.size, 40);
      assert.ok(
        [...credits.values()].every((n) => n === 1),
        "each event applied once",
      );
    }
    assert.equal(fixture.broker.topicCounts(TOPIC).duplicatesDropped, 10);
    assert.equal(foreignCount(), 40, "the foreign subscription holds each event once");
  });

  it("a retry and a replay in billing stay on billing's queue: neither ledger nor the foreign subscription sees them", async function () {
    const seen = new Map<string, number>();
    let retryFailures = 0;
    const billingHandler: MessageHandler = {
      kind: "transactional",
      type: "Credit",
      schema: z.object({ amount: z.number() }),
      async handle(b, tx, context) {
        seen.set(context.messageId, (seen.get(context.messageId) ?? 0) + 1);
        if (context.messageId === "retry-1" && retryFailures++ === 0)
          throw new Error("ECONNREFUSED downstream");
        if (context.messageId === "replay-1" && seen.get("replay-1") === 1)
          throw new DoNotRetryError("bad day");
        await tx.query(
          accountSql.insertCredit[tx.dialect],
          credit((b as { amount: number }).amount, context.messageId),
        );
      },
    };
    const ledgerHandler: MessageHandler = {
      ...billingHandler,
      handle: (b, tx, context) =>
        tx
          .query(
            accountSql.insertCredit[tx.dialect],
            credit((b as { amount: number }).amount, context.messageId),
          )
          .then(() => undefined),
    };
    // Every retry by a scheduled copy, 300 ms later: the copy billing sends is a new message on its queue.
    const policy = { ...defaultRetryPolicy, jitter: 0, transientDelaysMs: [300], maxInProcessWaitMs: 0 };
    const foreignBefore = foreignCount();
    await sendRawMessages(fixture.client, TOPIC, [
      { messageId: "retry-1", subject: "Credit", body: body({ amount: 5 }) },
      { messageId: "replay-1", subject: "Credit", body: body({ amount: 6 }) },
    ]);
    const billing = service("billing", { handlers: [billingHandler], retryPolicy: policy });
    const ledger = service("ledger", { handlers: [ledgerHandler], retryPolicy: policy });
    try {
      await waitUntil(
        () =>
          billing.stats.committed === 1 &&
          billing.stats.retriesExhausted === 1 &&
          ledger.stats.committed === 2,
        "billing retried one and dead-lettered the other; ledger applied both",
        20_000,
      );
      const { replayed } = await replayDeadLetters(fixture.client, "billing", () => true);
      assert.deepEqual(
        replayed.map((r) => r.messageId),
        ["replay-1"],
      );
      await waitUntil(() => billing.stats.committed === 2, "billing applies the replay", 20_000);
    } finally {
      await billing.stop();
      await ledger.stop();
    }
    assert.equal(billing.stats.retriesScheduled, 1);
    assert.equal(ledger.stats.settled, 2, "ledger received the two originals only");
    assert.equal(ledger.stats.duplicate, 0);
    assert.equal(fixture.broker.counts("ledger").active + fixture.broker.counts("ledger").scheduled, 0);
    assert.equal(
      foreignCount(),
      foreignBefore + 2,
      "the foreign subscription got the two originals, no copy",
    );
    for (const db of [billingDb, ledgerDb]) {
      const credits = await creditsPerMessage(db);
      assert.equal(credits.get("retry-1"), 1);
      assert.equal(credits.get("replay-1"), 1);
    }
  });

  it("a resend forwarded from a topic without duplicate detection is dropped by the service's queue", async function () {
    const publisher = createPublisher({
      queue: PARTNER,
      connection: { connectionString: fixture.broker.connectionString },
    });
    try {
      await publisher.publish("AccountCredited", "partner-1", { accountId: "acct-p", amount: 9 });
      await publisher.publish("AccountCredited", "partner-1", { accountId: "acct-p", amount: 9 }); // the resend
    } finally {
      await publisher.close();
    }
    assert.equal(fixture.broker.topicCounts(PARTNER).duplicatesDropped, 0, "the partner's topic kept both");
    await waitUntil(
      () => fixture.broker.counts("billing").duplicatesDropped === 1,
      "billing's queue drops one",
    );
    const billing = service("billing");
    try {
      await waitUntil(() => billing.stats.committed === 1, "applied", 20_000);
    } finally {
      await billing.stop();
    }
    assert.equal(billing.stats.settled, 1, "one delivery, not two");
    assert.equal(billing.stats.duplicate, 0);
    const credits = await creditsPerMessage(billingDb);
    assert.equal(
      [...credits.values()].reduce((a, b) => a + b, 0),
      43,
    );
  });
});
