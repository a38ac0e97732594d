// `npm run bench`: the worker end to end (publisher -> local broker -> worker -> committed effect in PostgreSQL)
// at maxConcurrentCalls 1, 8 and 32, set against its ceilings: the database (the worker's transaction as bare SQL
// in a loop, same concurrency), the broker (receive-and-complete through the SDK, no database), the naive
// check-then-insert handler of the seeds (no unique index) in the same receive loop, and the duplicate path alone;
// the same with the database a 1 ms round trip away (bench/e2e/remote.ts); every database connection through a
// proxy that counts round trips and commits (bench/e2e/proxy.ts). Then `sbinbox worker` processes: CPU per message
// against the floor, and resident memory draining a 50,000-message backlog (bench/e2e/worker-process.ts); and the
// outbox relay (bench/relay.ts); with `--only ledger`, the worker's CPU by subtraction (bench/e2e/ledger.ts).
// A benchmark, not a test: it prints tables, the ratios and the targets.
import { fork } from "node:child_process";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { ServiceBusClient } from "@azure/service-bus";
import { openDatabase } from "../src/app/database.ts";
import { moduleMigrations } from "../src/app/handler-module.ts";
import { EmbeddedPostgresServer } from "../src/embedded/postgres.ts";
import { exampleModule } from "../src/example/module.ts";
import { createPublisher } from "../src/servicebus/publisher.ts";
import { formatTable } from "./common.ts";
import {
  floor,
  NAIVE_TABLES,
  proxyCost,
  databaseCeiling,
  naive,
  receiveLoop,
  type Floor,
} from "./e2e/ceilings.ts";
import {
  BACKLOG,
  BATCH_IN_FLIGHT,
  BATCH_WAIT_MS,
  CPU_MESSAGES,
  HANDLER_KIND,
  MESSAGES,
  ONLY,
  PRECHECK,
  REMOTE_DELAY_MS,
  ROUNDS,
  batchSizeAt,
  drainWithWorker,
  freshEvents,
  serveBroker,
  type Harness,
} from "./e2e/harness.ts";
import { LEDGER_CONCURRENCY, LEDGER_ROUNDS, ledger } from "./e2e/ledger.ts";
import { batchedTable, loopbackRows, singleTable, type LoopbackRow } from "./e2e/loopback.ts";
import { DelayProxy } from "./e2e/proxy.ts";
import { remoteRows, remoteTable, type RemoteRow } from "./e2e/remote.ts";
import { target, targetLines } from "./e2e/targets.ts";
import {
  CPU_NODE_OPTIONS,
  maxRss,
  memoryLines,
  runWorkerProcess,
  type WorkerRun,
} from "./e2e/worker-process.ts";
import { publisherBench } from "./publisher.ts";
import { relayBench } from "./relay.ts";

/** The memory run's SBINBOX_BATCH_SIZE (1: one transaction per message). */
const MEMORY_BATCH = Number(process.env.SBINBOX_BENCH_MEMORY_BATCH ?? 8);
/** The `sbinbox worker` CPU runs' batch sizes: single, then batched. */
const CPU_BATCH = Number(process.env.SBINBOX_BENCH_CPU_BATCH ?? 8);
/**
 * The NODE_OPTIONS of the memory runs, comma-separated (an empty item is none): by default none, as a user starts
 * `sbinbox worker`; e.g. `,--max-semi-space-size=16` compares V8's own young generation.
 */
const MEMORY_NODE_OPTIONS = (process.env.SBINBOX_BENCH_NODE_OPTIONS ?? "").split(",");

const part = (name: string, inWorker = true) =>
  ONLY === "" || ONLY === name || (inWorker && ONLY === "worker");
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");

async function main(): Promise<void> {
  process.stdout.write(
    ONLY === "ledger"
      ? `e2e benchmark, the ledger: node ${process.version}, sbinbox worker draining ${CPU_MESSAGES} a run at ` +
          `concurrency ${LEDGER_CONCURRENCY}, ${LEDGER_ROUNDS} alternated rounds, ` +
          `${new Date().toISOString()}, load average ${load()}\n`
      : `e2e benchmark: node ${process.version}, ${MESSAGES} messages per cell, ${ROUNDS} rounds, handler ` +
          `${HANDLER_KIND}, batch in flight ${BATCH_IN_FLIGHT ?? "(worker's default)"}, ` +
          `${new Date().toISOString()}, load average ${load()}\n`,
  );
  const started = performance.now();
  // The publisher's rows first, in processes of their own, before PostgreSQL and the worker load the machine.
  if (part("publisher", false)) {
    process.stdout.write(["", ...(await publisherBench()), ""].join("\n"));
    if (ONLY === "publisher") return;
  }
  const server = await EmbeddedPostgresServer.create();
  const brokerChild = fork(fileURLToPath(import.meta.url), ["--serve"], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  let proxy: DelayProxy | undefined;
  try {
    const { connectionString } = await new Promise<{ connectionString: string }>((resolve) =>
      brokerChild.once("message", (m) => resolve(m as { connectionString: string })),
    );
    const directUrl = await server.createDatabase("sbinbox_e2e");
    proxy = await DelayProxy.start(Number(new URL(directUrl).port));
    const db = await openDatabase(
      { kind: "postgres", url: directUrl },
      { preCheck: true, maxConnections: 4 },
    );
    await db.store.migrate(await moduleMigrations(exampleModule, db.dialect));
    await db.sql.query(NAIVE_TABLES);
    const client = new ServiceBusClient(connectionString);
    const publisher = createPublisher({ client, queue: "bench" });
    const h: Harness = {
      client,
      publisher,
      db,
      directUrl,
      url: proxy.via(directUrl),
      proxy,
      broker: brokerChild,
      connectionString,
    };
    const lines: string[] = [];
    const targets: Parameters<typeof targetLines>[0][number][] = [];

    const cost = await proxyCost(h);
    await proxy.setDelay(REMOTE_DELAY_MS);
    const heldBefore = await proxy.counts();
    const remoteCost = await proxyCost(h);
    const heldAfter = await proxy.counts();
    await proxy.setDelay(0);
    const heldEach = (heldAfter.heldMs - heldBefore.heldMs) / (heldAfter.held - heldBefore.held);
    lines.push(
      `proxy: SELECT 1 one after another ${cost.direct.toFixed(3)} ms straight, ${cost.proxied.toFixed(3)} ms ` +
        `through the proxy at 0 delay (+${(cost.proxied - cost.direct).toFixed(3)} ms a round trip), ` +
        `${remoteCost.proxied.toFixed(3)} ms at ${REMOTE_DELAY_MS} ms each way (each chunk held ` +
        `${heldEach.toFixed(3)} ms on average)`,
      "",
    );

    // Warm-up: links, pools, plans and the JIT, on every path once.
    if (ONLY !== "memory") {
      await drainWithWorker(h, 8, freshEvents(500), "committed");
      await databaseCeiling(h, 8, 500);
      await receiveLoop(h, 8, 500, () => Promise.resolve());
      await naive(h, 8, 500);
    }

    if (/^(e2e|batch)\d+$/.test(ONLY)) {
      // For a profile (node --cpu-prof): the worker's fresh path alone, at the given concurrency.
      const c = Number(/\d+$/.exec(ONLY)![0]);
      const fresh = freshEvents(MESSAGES);
      const b = ONLY.startsWith("batch") ? batchSizeAt(c) : 1;
      const run = await drainWithWorker(h, c, fresh, "committed", b);
      const dup = await drainWithWorker(h, c, fresh, "duplicate", b);
      process.stdout.write(
        `at ${c}, batch ${b}: fresh ${run.rate.toFixed(0)} msgs/s (${run.roundTrips.toFixed(2)} round trips, ` +
          `${run.cpuUs.toFixed(0)} us CPU a message), duplicate ${dup.rate.toFixed(0)} msgs/s\n`,
      );
      return;
    }

    let loop: LoopbackRow[] = [];
    if (part("loopback")) {
      loop = await loopbackRows(h);
      const single = singleTable(loop);
      const batched = batchedTable(loop);
      lines.push(
        `end to end: publisher -> local broker (own process) -> worker -> committed effect in embedded PostgreSQL`,
        `msgs/s: draining a prefilled backlog of ${MESSAGES}, median of ${ROUNDS} rounds (e2e, db, db6, naive, ` +
          `dup); pre-check ${String(PRECHECK)}; latency: publishing at 30% of the e2e rate, publisher to commit; ` +
          `db = BEGIN with the marker in one write, effect, COMMIT (4 round trips); db6 = pre-check, BEGIN, ` +
          `marker, effect, COMMIT one by one (6); dup = duplicates read for first, as every redelivery is; ` +
          `rt/msg and commits/msg counted by the proxy; cpu = the bench process (the worker in it) a message`,
        ...formatTable(single.header, single.rows),
        "targets (issue 12): e2e/db >= 0.90; e2e/naive >= 1.00; dup/e2e >= 3.00",
        "",
        `batched (group commit, SBINBOX_BATCH_SIZE as given, SBINBOX_BATCH_WAIT_MS ${BATCH_WAIT_MS}); ` +
          `ratios against the per-message rows above; latency at the same load (30% of the single e2e rate)`,
        ...formatTable(batched.header, batched.rows),
        "targets (issue 12): b/db >= 1.50 at 32 and >= 1.00 at 8; b/naive >= 2.00 at 8 and 32",
        `spread over ${ROUNDS} rounds (min-max msgs/s):`,
        ...loop.map((r) => r.spread),
        "",
      );
      const at32 = loop.filter((r) => r.c === 32);
      targets.push(
        target(
          "batched >= 1.5 x single at 32, loopback",
          at32.map((r) => ["at 32", r.batched.rate / r.e2e.rate]),
          (x) => x >= 1.5,
        ),
        target(
          "p99 batched <= 2 x single at 30% load",
          loop.filter((r) => r.c > 1).map((r) => [`at ${r.c}`, r.batchedP99 / r.p99]),
          (x) => x <= 2,
        ),
      );
    }

    let remote: RemoteRow[] = [];
    if (part("remote")) {
      remote = await remoteRows(h);
      const table = remoteTable(remote);
      lines.push(
        `remote: the database behind the proxy at ${REMOTE_DELAY_MS} ms each way (${2 * REMOTE_DELAY_MS} ms round ` +
          `trip); msgs/s median of ${ROUNDS} rounds; db ceil the bare four-round-trip loop at the same delay`,
        ...formatTable(table.header, table.rows),
        ...remote.map((r) => r.spread),
        "",
      );
      targets.push(
        target(
          `batched >= 3 x single at 8 and 32, ${2 * REMOTE_DELAY_MS} ms round trip`,
          remote.filter((r) => r.c >= 8).map((r) => [`at ${r.c}`, r.batched.rate / r.e2e.rate]),
          (x) => x >= 3,
        ),
      );
    }
    if (loop.length + remote.length > 0) {
      targets.push(
        target(
          "<= 0.3 database round trips a message, batched",
          [
            ...loop.filter((r) => r.c >= 8).map((r): [string, number] => [`at ${r.c}`, r.batched.roundTrips]),
            ...remote
              .filter((r) => r.c >= 8)
              .map((r): [string, number] => [`at ${r.c} remote`, r.batched.roundTrips]),
          ],
          (x) => x <= 0.3,
        ),
      );
    }

    if (part("cpu")) {
      process.stdout.write(
        `cpu: the floor and sbinbox worker processes, ${CPU_MESSAGES} messages each ...\n`,
      );
      const f: Floor = await floor(h, CPU_MESSAGES);
      const single: WorkerRun = await runWorkerProcess(h, {
        messages: CPU_MESSAGES,
        batchSize: 1,
        nodeOptions: CPU_NODE_OPTIONS,
      });
      const batched: WorkerRun = await runWorkerProcess(h, {
        messages: CPU_MESSAGES,
        batchSize: CPU_BATCH,
        nodeOptions: CPU_NODE_OPTIONS,
        inFlight: BATCH_IN_FLIGHT,
      });
      const row = (label: string, r: WorkerRun): string[] => [
        label,
        r.rate.toFixed(0),
        r.cpuUs.toFixed(0),
        (r.cpuUs / f.totalUs).toFixed(2),
        r.writes.toFixed(2),
        r.roundTrips.toFixed(2),
        r.commits.toFixed(2),
        maxRss(r).toFixed(0),
      ];
      lines.push(
        `cpu: sbinbox worker processes (maxConcurrentCalls 16, no NODE_OPTIONS) draining ${CPU_MESSAGES} each; ` +
          `CPU and write system calls from /proc between the first and last sample with messages done; floor = a bare subscribe() + ` +
          `complete loop (${f.receiveUs.toFixed(0)} us) + a bare pg loop of the same four statements ` +
          `(${f.databaseUs.toFixed(0)} us) at 16, CPU a message in the bench process: ${f.totalUs.toFixed(0)} us`,
        ...formatTable(
          [
            "sbinbox worker",
            "msgs/s",
            "cpu us/msg",
            "x floor",
            "writes/msg",
            "rt/msg",
            "commits/msg",
            "max RSS MB",
          ],
          [row("single", single), row(`batch ${CPU_BATCH}`, batched)],
        ),
        "",
      );
      targets.push(
        target(
          "worker CPU a message <= 1.3 x the floor, single",
          [["x floor", single.cpuUs / f.totalUs]],
          (x) => x <= 1.3,
        ),
        target(
          `worker CPU a message <= 1.0 x the floor, batch ${CPU_BATCH}`,
          [["x floor", batched.cpuUs / f.totalUs]],
          (x) => x <= 1.0,
        ),
      );
    }

    // The ledger by subtraction (issue 41): long (about 15 minutes), so only when asked for by name.
    if (ONLY === "ledger") {
      const result = await ledger(h);
      lines.push(...result.lines);
      targets.push(...result.targets);
    }

    // The outbox relay beside the publisher (bench/relay.ts), on the same embedded server.
    if (part("relay", false)) lines.push(...(await relayBench(server)));
    if (part("memory")) {
      const peaks: [string, number][] = [];
      for (const nodeOptions of MEMORY_NODE_OPTIONS) {
        process.stdout.write(
          `memory: draining a backlog of ${BACKLOG} messages, NODE_OPTIONS "${nodeOptions}" ...\n`,
        );
        const run = await runWorkerProcess(h, { messages: BACKLOG, batchSize: MEMORY_BATCH, nodeOptions });
        lines.push(...memoryLines(run, MEMORY_BATCH, nodeOptions));
        peaks.push([`MB max, NODE_OPTIONS "${nodeOptions}"`, maxRss(run)]);
      }
      targets.push(
        target(`RSS of sbinbox worker draining ${BACKLOG} <= 150 MB`, peaks.slice(0, 1), (x) => x <= 150),
      );
    }
    process.stdout.write(
      [
        "",
        ...lines,
        ...(targets.length > 0 ? targetLines(targets, ONLY === "ledger" ? "issue 41" : "issue 29") : []),
        `load average at the end ${load()}; ${((performance.now() - started) / 60_000).toFixed(1)} minutes`,
        "",
      ].join("\n"),
    );
    await publisher.close();
    await client.close();
    await db.close();
  } finally {
    brokerChild.send({ stop: true });
    await proxy?.stop();
    await server.dispose();
  }
}

if (process.argv.includes("--serve")) await serveBroker();
else await main();
