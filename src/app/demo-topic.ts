import { exampleModule } from "../example/module.ts";
import { demoEvent } from "../example/demo-events.ts";
import { openDatabase } from "./database.ts";
import { balancesMatch, tally } from "./demo-checks.ts";
import { runDemoHarness, type DemoConsumer, type DemoOptions, type DemoResult } from "./demo-harness.ts";
import { loadDevPackage } from "./dev-package.ts";
import { moduleMigrations } from "./handler-module.ts";

const TOPIC = "accounts";
/**
 * Two consuming services, each with its own queue (named as its consumer), fed by a subscription that forwards to it,
 * and its own database. Ledger retries by scheduled copies at once (no wait under the lock): its copy of the failOnce
 * event goes to ledger's queue, never through the topic.
 */
const SERVICES = [
  { consumer: "billing", workers: 2, retriesByCopy: false, env: {} },
  {
    consumer: "ledger",
    workers: 1,
    retriesByCopy: true,
    env: { SBINBOX_RETRY_MAX_WAIT_MS: "0", SBINBOX_RETRY_DELAYS_MS: "500" },
  },
] as const;
/** A subscription of another team's (an audit trail): the default true filter, no forwarding, nobody receiving. */
const FOREIGN = "audit";
const LOCK_MS = 3_000;
const MAX_DELIVERY_COUNT = 10;

/**
 * The topic variant of the demo: one topic, two consuming services (billing with two competing workers, ledger with
 * one), each on its own queue (its subscription forwards to it) with its own database, and a foreign subscription that
 * must hold each published message once, whatever the services retry. N events with resends (dropped by the topic's duplicate
 * detection), poison (dead-lettered in each service's queue), a transient failure (retried per service), and a billing
 * worker killed between commit and complete. It holds when each service applied each event exactly once.
 */
export function runTopicDemo(options: DemoOptions): Promise<DemoResult> {
  const { out } = options;
  return runDemoHarness(options, async (cleanups) => {
    out(
      "starting the local broker (a topic, three subscriptions, two forwarded to queues) and an embedded PostgreSQL ...",
    );
    const { EmbeddedPostgresServer, LocalBroker, defaultConfig, queueDefaults, serviceTopic } =
      await loadDevPackage("sbinbox demo");
    const config = defaultConfig();
    const { topic, queues } = serviceTopic(
      TOPIC,
      SERVICES.map((s) => s.consumer),
      { lockDurationMs: LOCK_MS, maxDeliveryCount: MAX_DELIVERY_COUNT },
    );
    // Another team's subscription: the broker's defaults (a subscription has no duplicate detection), no forwarding
    // of any kind, and only the default true filter (the rule serviceTopic gives every subscription), so it sees
    // whatever reaches the topic.
    topic.subscriptions.push({
      name: FOREIGN,
      queue: {
        ...queueDefaults,
        name: `${TOPIC}/Subscriptions/${FOREIGN}`,
        requiresDuplicateDetection: false,
      },
      rules: topic.subscriptions[0]!.rules,
    });
    config.queues = queues;
    config.topics = [topic];
    const broker = await LocalBroker.start({ port: 0, config });
    cleanups.push(() => broker.stop());
    const postgres = await EmbeddedPostgresServer.create();
    cleanups.push(() => postgres.dispose());
    const consumers: DemoConsumer[] = [];
    for (const [i, service] of SERVICES.entries()) {
      const url = await postgres.createDatabase(`sbinbox_${service.consumer}`);
      const db = await openDatabase({ kind: "postgres", url }, { preCheck: true, maxConnections: 4 });
      cleanups.push(() => db.close());
      await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
      consumers.push({
        name: service.consumer,
        queue: service.consumer,
        sql: db.sql,
        workers: service.workers,
        // billing's workers carry the fault switch.
        faulty: i === 0,
        env: {
          SBINBOX_SERVICEBUS_CONNECTION_STRING: broker.connectionString,
          SBINBOX_POSTGRES_URL: url,
          // The worker knows nothing of the topic: it receives from its own queue and retries there.
          SBINBOX_QUEUE: service.consumer,
          SBINBOX_CONSUMER: service.consumer,
          SBINBOX_HTTP_HOST: "127.0.0.1",
          SBINBOX_GRACE_PERIOD_MS: "5000",
          SBINBOX_QUEUE_LOCK_DURATION_MS: String(LOCK_MS),
          SBINBOX_QUEUE_MAX_DELIVERY_COUNT: String(MAX_DELIVERY_COUNT),
          ...service.env,
        },
      });
    }
    out(
      `topic ${TOPIC}: subscriptions ${consumers.map((s) => s.name).join(", ")} forwarding to the queues of the same names, one database each, migrated; subscription ${FOREIGN} of another team, no filter`,
    );

    return {
      broker,
      target: TOPIC,
      consumers,
      event: demoEvent,
      async report(run) {
        const { events, resent, poison, expected, killed } = run;
        const resends = resent.length;
        const dropped = broker.topicCounts(TOPIC).duplicatesDropped;
        out(
          `  events published          ${events.length} distinct to topic ${TOPIC}, ${resends} resent, ${poison.length} poison`,
        );
        out(
          `  resends dropped by topic  ${dropped} (duplicate detection on the derived MessageId, once for all subscriptions)`,
        );
        out(
          `  worker killed after commit ${killed} (billing's; its message redelivered and absorbed by billing's inbox)`,
        );
        let ok = dropped === resends && killed >= 1;
        const fields: string[] = [];
        for (const [i, consumer] of consumers.entries()) {
          const name = consumer.name;
          const { effects, lost, doubled, unexpected } = await tally(consumer.sql, expected);
          const deadLettered = broker.counts(consumer.queue).deadLettered;
          const balances = await balancesMatch(consumer.sql, events);
          const { duplicate: dup, retriesScheduled: retried } = run.stats.get(name)!;
          out(
            `  ${name.padEnd(25)} ${effects} effects; lost ${lost}, doubled ${doubled}, unexpected ${unexpected}; ` +
              `${dup} duplicates in its inbox; ${retried} retry copies scheduled on its queue; ${deadLettered} dead-lettered; ` +
              `balances ${balances ? "match" : "DO NOT match"}`,
          );
          // Ledger's failOnce event must have gone through a scheduled copy on its queue, or the demo did not show it.
          if (SERVICES[i]!.retriesByCopy) ok &&= retried >= 1;
          ok &&=
            lost === 0 &&
            doubled === 0 &&
            unexpected === 0 &&
            effects === expected.size &&
            deadLettered === poison.length &&
            balances;
          fields.push(
            `${name}.effects=${effects} ${name}.duplicates_in_inbox=${dup} ` +
              `${name}.retries_scheduled=${retried} ${name}.deadlettered=${deadLettered} ` +
              `${name}.lost=${lost} ${name}.doubled=${doubled}`,
          );
        }
        // Every distinct event and poison message once: a retry or replay copy reaching it would count on top.
        const foreign = broker.counts(`${TOPIC}/Subscriptions/${FOREIGN}`).active;
        const published = events.length + poison.length;
        out(
          `  ${FOREIGN.padEnd(25)} ${foreign} messages held for a foreign consumer; ${published} published (no copy reached it: ${foreign === published ? "yes" : "NO"})`,
        );
        ok &&= foreign === published;
        out(
          ok
            ? "  verdict                   exactly once per consumer: it holds"
            : "  verdict                   FAILED",
        );
        const result =
          `RESULT topic=${TOPIC} distinct=${events.length} resends=${resends} dropped_by_broker=${dropped} ` +
          `poison=${poison.length} ${fields.join(" ")} ${FOREIGN}.messages=${foreign}`;
        return { ok, result };
      },
    };
  });
}
