// `node scripts/sqlserver-e2e.ts` (run by scripts/sqlserver-tier.sh): the product's runtime path on a TDS server.
// SBINBOX_TEST_MSSQL_SERVER is a server-level connection string (its login may create databases). In a database of
// its own: `sbinbox migrate` twice with a team's module of the project's own (test/fixtures/orders-handlers, not
// handlers/, which is the team's to replace; the second run must apply nothing), then the local broker and two
// `sbinbox worker` processes running it on one queue without duplicate detection, so that resends
// reach the inbox; one worker kills itself between a commit and the message's complete and is replaced; an order row
// held by another transaction makes one message's insert time out (a transient failure, retried in place); one
// poison message. Exit 0 only when the database shows every order once, one inbox marker per order, the queue empty
// and only the poison dead-lettered. The last line is
// RESULT orders=.. markers=.. resends=.. deadlettered=.. killed=.. held_order_failures=.. (classes)
// SBINBOX_E2E_HELD_NOTE_CLASSES (comma-separated) is what the held order's failures may be classed as: `transient` on
// real SQL Server (the GitHub workflow's SQL Server job sets it), by default `transient,unavailable`, because
// Babelfish ignores the cancel (TDS attention) of a statement waiting on a lock and the driver then closes the
// connection, which is an outage to the worker (unavailable). Any other class fails the run.
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import mssql from "mssql";
import { spawnWorker, type WorkerProcess } from "../src/app/demo-workers.ts";
import { loadDevPackage } from "../src/app/dev-package.ts";
import { createServiceBusClient } from "../src/servicebus/client.ts";
import { deriveMessageId } from "../src/servicebus/message-id.ts";
import { createPublisher } from "../src/servicebus/publisher.ts";
import { sendRawMessages } from "../src/servicebus/raw.ts";
import { runCli } from "../test/helpers/cli.ts";
import { takeDeadLetters } from "../test/helpers/broker.ts";
import { OWN_RETRY } from "../src/servicebus/throttling.ts";

const HANDLERS = fileURLToPath(new URL("../test/fixtures/orders-handlers/index.ts", import.meta.url));
const QUEUE = "orders";
const CONSUMER = "sbinbox-tds";
const ORDERS = 200;
const RESEND_EVERY = 10;
/** The order whose row another transaction holds while the workers run: its insert waits out the statement time-out. */
const HELD_ORDER = 7;
/** Short, so the held order's insert times out (transient) within seconds and the kill's message comes back soon. */
const STATEMENT_TIMEOUT_MS = 2_000;
const LOCK_MS = 5_000;
const TIMEOUT_MS = 90_000;

const out = (line: string) => process.stdout.write(`sqlserver-e2e: ${line}\n`);

async function main(): Promise<number> {
  const server = process.env.SBINBOX_TEST_MSSQL_SERVER;
  if (!server)
    throw new Error("SBINBOX_TEST_MSSQL_SERVER must hold a server-level SQL Server connection string");
  const accepted = new Set(
    (process.env.SBINBOX_E2E_HELD_NOTE_CLASSES ?? "transient,unavailable")
      .split(",")
      .map((c) => c.trim())
      .filter(Boolean),
  );
  const database = `sbinbox_e2e_${process.pid}_${randomBytes(3).toString("hex")}`;
  const cleanups: (() => Promise<unknown>)[] = [];
  const workers: WorkerProcess[] = [];
  try {
    const admin = await new mssql.ConnectionPool(server).connect();
    cleanups.push(() => admin.close());
    await admin.request().batch(`CREATE DATABASE [${database}]`);
    cleanups.push(() => admin.request().batch(`DROP DATABASE [${database}]`));
    const connectionString = `${server};Database=${database}`;
    const env = { SBINBOX_SQLSERVER_CONNECTION_STRING: connectionString, SBINBOX_HANDLERS: HANDLERS };

    // migrate twice: the second run is a no-op.
    const first = await runCli(["migrate"], env);
    if (first.code !== 0) throw new Error(`sbinbox migrate failed (${first.code}): ${first.stderr}`);
    if (!/applied .*0001_inbox.*orders:0001_orders/.test(first.stdout))
      throw new Error(`the first sbinbox migrate did not apply the inbox and the orders: ${first.stdout}`);
    const second = await runCli(["migrate"], env);
    if (second.code !== 0 || !second.stdout.includes("sbinbox migrate: up to date"))
      throw new Error(
        `the second sbinbox migrate was not a no-op (${second.code}): ${second.stdout}${second.stderr}`,
      );
    out(`migrate applied the inbox and the orders once; the second run: "${second.stdout.trim()}"`);

    const db = await new mssql.ConnectionPool(connectionString).connect();
    cleanups.push(() => db.close());
    const count = async (sql: string) =>
      Number((await db.request().query<{ n: number }>(sql)).recordset[0]?.n);

    const { LocalBroker, defaultConfig, queueDefaults } = await loadDevPackage("the TDS end-to-end run");
    const config = defaultConfig();
    config.queues = [
      {
        ...queueDefaults,
        name: QUEUE,
        lockDurationMs: LOCK_MS,
        maxDeliveryCount: 10,
        requiresDuplicateDetection: false,
      },
    ];
    const broker = await LocalBroker.start({ port: 0, config });
    cleanups.push(() => broker.stop());
    const client = createServiceBusClient(
      { connectionString: broker.connectionString },
      // The worker and the publisher retry ServerBusy themselves (src/servicebus/throttling.ts).
      { retryOptions: OWN_RETRY },
    );
    cleanups.push(() => client.close());

    // Another transaction holds the held order's key: that message's insert waits, times out, and is retried.
    const holder = new mssql.Transaction(db);
    await holder.begin();
    let holding = true;
    cleanups.push(() => (holding ? holder.rollback() : Promise.resolve()));
    await holder
      .request()
      .input("id", mssql.BigInt, HELD_ORDER)
      .query("INSERT INTO dbo.Orders (OrderId, Customer, MessageId) VALUES (@id, N'held', N'held')");

    const events = Array.from({ length: ORDERS }, (_, i) => ({
      type: "OrderPlaced",
      key: `order-${i + 1}`,
      body: { orderId: i + 1, customer: `customer ${i + 1}` },
    }));
    const heldId = deriveMessageId("OrderPlaced", `order-${HELD_ORDER}`);
    const victimId = deriveMessageId("OrderPlaced", "order-3");
    // The held order's failed attempts and their classes: on SQL Server the time-out is transient (retried in place);
    // a server that does not honour the cancel (TDS attention) of a statement waiting on a lock has its connection
    // closed by the driver instead, and the worker pauses as for an outage (unavailable), then resumes.
    let transient = 0;
    const failureClasses = new Set<string>();
    const start = async (name: string, extra: Record<string, string>) => {
      const worker = await spawnWorker(name, {
        ...env,
        ...extra,
        SBINBOX_SERVICEBUS_CONNECTION_STRING: broker.connectionString,
        SBINBOX_QUEUE: QUEUE,
        SBINBOX_CONSUMER: CONSUMER,
        SBINBOX_HTTP_HOST: "127.0.0.1",
        SBINBOX_GRACE_PERIOD_MS: "5000",
        SBINBOX_QUEUE_LOCK_DURATION_MS: String(LOCK_MS),
        SBINBOX_QUEUE_MAX_DELIVERY_COUNT: "10",
        SBINBOX_DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
      });
      let partial = "";
      worker.child.stderr?.on("data", (d: string) => {
        const lines = (partial + d).split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) {
          if (!line.includes(heldId) || !/"msg":"(attempt failed|message abandoned)/.test(line)) continue;
          transient += 1;
          failureClasses.add(/"errorClass":"(\w+)"/.exec(line)?.[1] ?? "unknown");
        }
      });
      workers.push(worker);
      return worker;
    };
    // Both carry the switch: whichever commits the victim's message dies before completing it.
    const fault = { SBINBOX_FAULT_KILL_AFTER_COMMIT: victimId };
    await Promise.all([start("worker-1", fault), start("worker-2", fault)]);

    const publisher = createPublisher({ client, queue: QUEUE });
    cleanups.push(() => publisher.close());
    await publisher.publishBatch(events);
    const resent = events.filter((_, i) => i % RESEND_EVERY === 0);
    await publisher.publishBatch(resent);
    const poisonId = `poison-${database}`;
    await sendRawMessages(client, QUEUE, [
      { messageId: poisonId, subject: "OrderPlaced", body: Buffer.from('{"orderId":-1,"customer":"x"}') },
    ]);
    out(
      `published ${ORDERS} orders, ${resent.length} resends of them (no duplicate detection), 1 poison message`,
    );

    let killed = 0;
    const deadline = Date.now() + TIMEOUT_MS;
    for (;;) {
      for (const w of [...workers]) {
        if (w.child.signalCode === "SIGKILL" && !("replaced" in w)) {
          Object.assign(w, { replaced: true });
          killed += 1;
          out(`${w.name} was killed between commit and complete; starting a replacement`);
          await start(`${w.name}-restarted`, {});
        } else if (w.child.exitCode !== null && !("replaced" in w))
          throw new Error(`${w.name} exited with code ${w.child.exitCode}: ${w.stderrTail}`);
      }
      if (holding && transient > 0) {
        await holder.rollback();
        holding = false;
        out(
          `the held order's insert timed out (${[...failureClasses].join(", ")}) and is retried; the holder rolled back`,
        );
      }
      const c = broker.counts(QUEUE);
      const orders = await count("SELECT COUNT(*) AS n FROM dbo.Orders");
      if (orders === ORDERS && !holding && c.active + c.locked === 0 && c.deadLettered >= 1) break;
      if (Date.now() > deadline) {
        out(
          `timed out: ${orders} orders, queue ${JSON.stringify(c)}, transient ${transient}, killed ${killed}`,
        );
        for (const w of workers) out(`${w.name}'s last output:\n${w.stderrTail.slice(-1500)}`);
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }

    const orders = await count("SELECT COUNT(*) AS n FROM dbo.Orders");
    const distinctMessages = await count("SELECT COUNT(DISTINCT MessageId) AS n FROM dbo.Orders");
    const markers = await count(
      `SELECT COUNT(*) AS n FROM dbo.Inbox
      WHERE ConsumerId = (SELECT Id FROM dbo.InboxConsumer WHERE Name = N'${CONSUMER}') AND ClaimedUtc IS NULL`,
    );
    const victimOrders = await count("SELECT COUNT(*) AS n FROM dbo.Orders WHERE OrderId = 3");
    const c = broker.counts(QUEUE);
    const dead = await takeDeadLetters(client, QUEUE, 10, 1_000);
    const problems: string[] = [];
    if (orders !== ORDERS || distinctMessages !== ORDERS)
      problems.push(`${orders} orders from ${distinctMessages} messages`);
    if (markers !== ORDERS) problems.push(`${markers} processed markers for ${ORDERS} orders`);
    if (victimOrders !== 1) problems.push(`the killed worker's order is there ${victimOrders} times`);
    if (c.active + c.locked !== 0) problems.push(`queue not empty: ${JSON.stringify(c)}`);
    if (dead.length !== 1 || dead[0]?.messageId !== poisonId)
      problems.push(
        `dead-lettered: ${dead.map((m) => `${String(m.messageId)} (${m.deadLetterReason})`).join(", ")}`,
      );
    else
      out(`the poison was dead-lettered: ${dead[0].deadLetterReason}: ${dead[0].deadLetterErrorDescription}`);
    if (killed !== 1) problems.push(`killed between commit and complete ${killed} times, not once`);
    if (transient === 0) problems.push("the held order's insert never failed");
    const unexpected = [...failureClasses].filter((c) => !accepted.has(c));
    if (unexpected.length > 0)
      problems.push(
        `the held order's failures were classed ${unexpected.join(", ")}; accepted: ${[...accepted].join(", ")}`,
      );
    for (const p of problems) out(`FAILED: ${p}`);
    out(
      `RESULT orders=${orders} markers=${markers} resends=${resent.length} deadlettered=${dead.length} ` +
        `killed=${killed} held_order_failures=${transient} (${[...failureClasses].join(", ")})`,
    );
    return problems.length === 0 ? 0 : 1;
  } finally {
    await Promise.all(
      workers.map(async (w) => {
        if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGTERM");
        await w.exited;
      }),
    );
    for (const cleanup of cleanups.reverse())
      await cleanup().catch((error: unknown) => out(`clean-up: ${String(error)}`));
  }
}

process.exitCode = await main();
