/**
 * Each error of STATEMENT_FAULTS (the table docs/failure-handling.md shows) raised on the real server by a handler's
 * statement, through the real worker, the local broker and the @azure/service-bus SDK: the message is dead-lettered
 * after the attempts its schedule gives (or at once, where the worker refuses the statement before sending it), the
 * description names the handler and the statement, a healthy message beside it commits on its first attempt, and
 * the worker never pauses for an outage. Run on the embedded PostgreSQL by npm test, and on the TDS server by the
 * SQL Server tier (scripts/sqlserver-tier.sh), where a row the server cannot raise with its number (Babelfish's one
 * number for every missing object) is skipped with the server's answer as the reason.
 */
import assert from "node:assert/strict";
import type { ServiceBusReceivedMessage } from "@azure/service-bus";
import { z } from "zod";
import type { MessageHandler } from "../../src/domain/handler.ts";
import type { Dialect } from "../../src/domain/sql.ts";
import { sqlServerErrorChain, sqlServerErrorNumbers } from "../../src/inbox/sqlserver/error-chain.ts";
import { STATEMENT_FAULTS, type StatementFault } from "../../src/inbox/statement-faults.ts";
import type { InboxStore } from "../../src/inbox/store.ts";
import { createPublisher, type Publisher } from "../../src/servicebus/publisher.ts";
import { defaultRetryPolicy, type RetryPolicy } from "../../src/worker/retry-policy.ts";
import { createWorker, type Worker } from "../../src/worker/worker.ts";
import type { Backend, BackendDatabase } from "../conformance/backends.ts";
import { brokerConfig, takeDeadLetters, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { skipFor } from "../conformance/guards.ts";
import { capturedLogs } from "../helpers/logs.ts";

const QUEUE = "sbinbox";

/** One retry after a permanent failure, three after a missing table or column: told apart by the attempt count. */
const POLICY: RetryPolicy = {
  ...defaultRetryPolicy,
  jitter: 0,
  transientDelaysMs: [50],
  permanentDelaysMs: [50],
  migrationDelaysMs: [200, 200, 200],
  maxInProcessWaitMs: 1_000,
  lockMarginMs: 1_000,
};

interface Mistake {
  readonly sql: string;
  readonly params?: unknown;
  /** Beside the table's `refusedAsStatements`: this mistake of its row is refused too (params not an array). */
  readonly refusedAsStatements?: boolean;
}

/** A table that does not exist until the test creates it, as a migration applied late would. */
interface LateTable {
  readonly table: string;
  readonly create: string;
  readonly insert: string;
}

/** The business tables, in schema `s`, and each row's mistake against them. */
interface DialectFixture {
  readonly setup: (s: string) => string[];
  /** What the run's clean-up of the schema cannot drop itself (SQL Server's drops tables only). */
  readonly teardown: (s: string) => string[];
  readonly healthy: (s: string) => string;
  readonly readHealthy: (s: string) => string;
  readonly lateTable: (s: string) => LateTable;
  readonly mistakes: (s: string) => Readonly<Record<string, Mistake>>;
}

const FIXTURES: Record<Dialect, DialectFixture> = {
  postgres: {
    setup: (s) => [
      `CREATE TABLE ${s}.fault_items (id int PRIMARY KEY, name varchar(4) NOT NULL,
        parent int REFERENCES ${s}.fault_items (id), n int CHECK (n > 0))`,
      `INSERT INTO ${s}.fault_items (id, name) VALUES (1, 'one')`,
      `CREATE TABLE ${s}.fault_healthy (message_id text PRIMARY KEY, attempt int NOT NULL, delivery int NOT NULL)`,
    ],
    teardown: () => [],
    healthy: (s) => `INSERT INTO ${s}.fault_healthy (message_id, attempt, delivery) VALUES ($1, $2, $3)`,
    readHealthy: (s) => `SELECT message_id AS "id", attempt, delivery FROM ${s}.fault_healthy`,
    lateTable: (s) => ({
      table: `${s}.fault_late`,
      create: `CREATE TABLE ${s}.fault_late (id text PRIMARY KEY)`,
      insert: `INSERT INTO ${s}.fault_late (id) VALUES ($1)`,
    }),
    mistakes: (s) => ({
      "08P01": { sql: "SELECT 1 WHERE $1::text IS NOT NULL", params: ["a", "b"] },
      "42P02": { sql: "SELECT $1::text", params: [] },
      "42P18": { sql: "SELECT $2::text", params: ["a", "b"] },
      "42601": { sql: "SELEC 1" },
      "42883": { sql: "SELECT no_such_function()" },
      "42P01": { sql: `SELECT * FROM ${s}.no_such_table` },
      "42703": { sql: `SELECT no_such_column FROM ${s}.fault_items` },
      "22P02": { sql: "SELECT $1::int", params: ["abc"] },
      "22001": { sql: `INSERT INTO ${s}.fault_items (id, name) VALUES (2, $1)`, params: ["too long"] },
      "22003": { sql: "SELECT $1::int", params: [2 ** 40] },
      "22012": { sql: "SELECT 1 / $1::int", params: [0] },
      "23502": { sql: `INSERT INTO ${s}.fault_items (id, name) VALUES (3, NULL)` },
      "23503": { sql: `INSERT INTO ${s}.fault_items (id, name, parent) VALUES (4, 'x', 99)` },
      "23505": { sql: `INSERT INTO ${s}.fault_items (id, name) VALUES (1, 'dup')` },
      "23514": { sql: `INSERT INTO ${s}.fault_items (id, name, n) VALUES (5, 'x', -1)` },
      TypeError: { sql: "SELECT $1::text", params: "not an array", refusedAsStatements: true },
    }),
  },
  sqlserver: {
    setup: (s) => [
      `CREATE TABLE ${s}.FaultItems (Id int NOT NULL PRIMARY KEY, Name nvarchar(4) NOT NULL,
        Parent int NULL REFERENCES ${s}.FaultItems (Id), N int NULL CHECK (N > 0))`,
      `INSERT INTO ${s}.FaultItems (Id, Name) VALUES (1, N'one')`,
      `EXEC (N'CREATE PROCEDURE ${s}.FaultOne @a int AS SELECT @a AS a')`,
      `CREATE TABLE ${s}.FaultHealthy (MessageId nvarchar(100) NOT NULL PRIMARY KEY, Attempt int NOT NULL,
        Delivery int NOT NULL)`,
    ],
    teardown: (s) => [
      `DROP PROCEDURE ${s}.FaultOne`,
      `DROP TABLE ${s}.FaultItems`,
      `DROP TABLE ${s}.FaultHealthy`,
      `DROP TABLE IF EXISTS ${s}.FaultLate`,
    ],
    healthy: (s) => `INSERT INTO ${s}.FaultHealthy (MessageId, Attempt, Delivery) VALUES (@p1, @p2, @p3)`,
    readHealthy: (s) =>
      `SELECT MessageId AS id, Attempt AS attempt, Delivery AS delivery FROM ${s}.FaultHealthy`,
    lateTable: (s) => ({
      table: `${s}.FaultLate`,
      create: `CREATE TABLE ${s}.FaultLate (Id nvarchar(100) NOT NULL PRIMARY KEY)`,
      insert: `INSERT INTO ${s}.FaultLate (Id) VALUES (@p1)`,
    }),
    mistakes: (s) => ({
      "8144": { sql: `EXEC ${s}.FaultOne @p1, @p2`, params: [1, 2] },
      "201": { sql: `EXEC ${s}.FaultOne` },
      "137": { sql: "SELECT @p1 AS a, @p2 AS b", params: [1] },
      "102": { sql: "SELECT 1 +" },
      "208": { sql: `SELECT * FROM ${s}.NoSuchTable` },
      "207": { sql: `SELECT NoSuchColumn FROM ${s}.FaultItems` },
      "245": { sql: "SELECT 1 AS x WHERE 1 = 'abc'" },
      "515": { sql: `INSERT INTO ${s}.FaultItems (Id, Name) VALUES (3, NULL)` },
      "547": { sql: `INSERT INTO ${s}.FaultItems (Id, Name, Parent) VALUES (4, N'x', 99)` },
      "2627": { sql: `INSERT INTO ${s}.FaultItems (Id, Name) VALUES (1, N'dup')` },
      "2628": { sql: `INSERT INTO ${s}.FaultItems (Id, Name) VALUES (2, @p1)`, params: ["too long"] },
      "8134": { sql: "SELECT 1 / @p1 AS x", params: [0] },
      "8115": { sql: "SELECT CAST(2147483647 AS int) + @p1 AS x", params: [1] },
      EPARAM: { sql: "SELECT @p1 AS a", params: [{ not: "a string" }] },
    }),
  },
};

/** Babelfish's one error number for every object, function or statement it lacks or cannot parse. */
const BABELFISH_ERROR = 33557097;

/** The codes the server's error carries, as the table names them: SQLSTATE, error numbers, driver codes. */
function codesOf(dialect: Dialect, error: unknown): string[] {
  if (dialect === "postgres") {
    const code = (error as { code?: unknown }).code;
    return [
      ...(typeof code === "string" ? [code] : []),
      ...(error instanceof TypeError ? ["TypeError"] : []),
    ];
  }
  const codes = sqlServerErrorChain(error)
    .map((e) => (e as { code?: unknown }).code)
    .filter((c): c is string => typeof c === "string");
  return [...sqlServerErrorNumbers(error).map(String), ...codes];
}

/** A message's JSON body, however it arrived (bytes, a string or a structured AMQP value). */
function parsedBody(body: unknown): { code?: unknown } | null {
  const text =
    body instanceof Uint8Array
      ? Buffer.from(body).toString("utf8")
      : typeof body === "string"
        ? body
        : undefined;
  return (text === undefined ? body : JSON.parse(text)) as { code?: unknown } | null;
}

function bodyOf(message: ServiceBusReceivedMessage): { code: string } {
  return parsedBody(message.body) as { code: string };
}

export function statementFaultsSuite(backend: Backend): void {
  describe(`a handler's statement errors on ${backend.name}: the message fails by the retry policy, the worker never pauses`, function () {
    this.timeout(60_000);
    const fixture = useLocalBroker(
      brokerConfig({
        [QUEUE]: { LockDuration: "PT30S", MaxDeliveryCount: 10, RequiresDuplicateDetection: true },
      }),
    );
    const dialect = backend.dialect;
    const tables = FIXTURES[dialect];
    let db: BackendDatabase;
    let schema: string;
    let mistakes: Readonly<Record<string, Mistake>>;
    let store: InboxStore;
    let worker: Worker;
    let publisher: Publisher;
    const logs = capturedLogs();
    /** What the server answered to each row's mistake, found before the worker runs it. */
    const answered = new Map<string, { codes: string[]; message: string }>();
    let late: LateTable;
    let lateCreated: Promise<unknown> | undefined;

    const faulty: MessageHandler = {
      kind: "transactional",
      type: "Faulty",
      schema: z.object({ code: z.string() }),
      async handle(body, tx) {
        const { code } = body as { code: string };
        if (code === "late") {
          await tx.query(late.insert, [code]);
          return;
        }
        const mistake = mistakes[code]!;
        await tx.query(mistake.sql, mistake.params as unknown[] | undefined);
      },
    };
    const faultyStatements: MessageHandler = {
      kind: "statements",
      type: "FaultyStatements",
      schema: z.object({ code: z.string() }),
      statements: (body) => {
        const mistake = mistakes[(body as { code: string }).code]!;
        return [{ sql: mistake.sql, params: mistake.params as unknown[] | undefined }];
      },
    };
    const healthy: MessageHandler = {
      kind: "transactional",
      type: "Healthy",
      schema: z.object({ code: z.string() }),
      async handle(body, tx, context) {
        const { code } = body as { code: string };
        await tx.query(tables.healthy(schema), [code, context.attempt, context.deliveryCount]);
      },
    };

    before(async () => {
      db = await backend.database("statement_faults");
      schema = db.schema ?? (dialect === "postgres" ? "public" : "dbo");
      mistakes = tables.mistakes(schema);
      late = tables.lateTable(schema);
      store = db.createStore({ preCheck: true });
      await store.migrate();
      for (const sql of tables.setup(schema)) await db.raw.query(sql);
      // Each row's mistake raised on the server first, outside the worker: what it answers, for the rows below.
      for (const [code, mistake] of Object.entries(mistakes)) {
        const outcome = await store.process({ messageId: `probe-${code}`, consumer: "probe" }, (tx) =>
          tx.query(mistake.sql, mistake.params as unknown[] | undefined).then(() => undefined),
        );
        assert.equal(outcome.kind, "failed", `the mistake of ${code} failed on the server`);
        if (outcome.kind !== "failed") continue;
        assert.equal(outcome.errorClass, "permanent", `${code}: ${String(outcome.error)}`);
        answered.set(code, { codes: codesOf(dialect, outcome.error), message: String(outcome.error) });
      }
      publisher = createPublisher({ client: fixture.client, queue: QUEUE });
      worker = createWorker({
        client: fixture.client,
        store,
        queue: QUEUE,
        consumer: "faults",
        handlers: [faulty, faultyStatements, healthy],
        maxConcurrentCalls: 8,
        batchSize: 1,
        gracePeriodMs: 5_000,
        outageBackoffMinMs: 100,
        outageBackoffMaxMs: 1_000,
        sweepIntervalMs: 0,
        retryPolicy: POLICY,
        logger: logs.logger,
        onRetry: (_message, retry) => {
          // The late table's migration lands while its message waits for its retry.
          if (retry.attempt === 1 && lateCreated === undefined && isLate(_message.body))
            lateCreated = db.raw.query(late.create);
        },
      });
      worker.start();
    });
    after(async () => {
      await worker?.stop();
      await publisher?.close();
      if (db !== undefined) for (const sql of tables.teardown(schema)) await db.raw.query(sql);
      await db?.dispose();
    });

    it("the table names every row's mistake, and the test raises each", () => {
      assert.deepEqual(Object.keys(mistakes).sort(), STATEMENT_FAULTS[dialect].map((f) => f.code).sort());
    });

    for (const fault of STATEMENT_FAULTS[dialect]) {
      it(`${fault.code} (${fault.name}): dead-lettered after its ${fault.retry} schedule, naming the handler and the statement; a healthy message beside it commits at once`, async function () {
        skipFor(this, lacking(fault));
        const mistake = mistakes[fault.code]!;
        await publisher.publish("Faulty", `f-${fault.code}`, { code: fault.code });
        await publisher.publish("FaultyStatements", `s-${fault.code}`, { code: fault.code });
        await publisher.publish("Healthy", `h-${fault.code}`, { code: fault.code });
        await waitUntil(
          () => fixture.broker.counts(QUEUE).deadLettered >= 2,
          `both of ${fault.code}'s messages are dead-lettered`,
          30_000,
        );
        const dead = await takeDeadLetters(fixture.client, QUEUE, 10, 1_000);
        assert.equal(dead.length, 2, dead.map((m) => m.deadLetterErrorDescription).join("\n"));
        const attempts = fault.retry === "migration" ? 1 + POLICY.migrationDelaysMs!.length : 2;
        const byType = new Map(dead.map((m) => [String(m.subject), m]));
        const code = (m: ServiceBusReceivedMessage | undefined) => m && bodyOf(m).code;
        assert.equal(code(byType.get("Faulty")), fault.code);
        assert.equal(code(byType.get("FaultyStatements")), fault.code);
        const transactional = byType.get("Faulty")!;
        assert.equal(transactional.deadLetterReason, "RetriesExhausted");
        const description = String(transactional.deadLetterErrorDescription);
        assert.ok(description.startsWith(`after ${attempts} attempts: permanent `), description);
        assert.ok(description.includes('(handler "Faulty"'), description);
        if (fault.code !== "TypeError")
          assert.ok(description.includes(`statement "${mistake.sql.replace(/\s+/g, " ")}"`), description);
        const statements = byType.get("FaultyStatements")!;
        const statementsText = String(statements.deadLetterErrorDescription);
        if (fault.refusedAsStatements === true || mistake.refusedAsStatements === true) {
          assert.equal(statements.deadLetterReason, "NotRetryable", statementsText);
          assert.ok(statementsText.startsWith("after 1 attempt: permanent DoNotRetryError"), statementsText);
        } else {
          assert.equal(statements.deadLetterReason, "RetriesExhausted", statementsText);
          assert.ok(statementsText.startsWith(`after ${attempts} attempts: permanent `), statementsText);
        }
        assert.ok(statementsText.includes('handler "FaultyStatements"'), statementsText);
        assert.deepEqual(
          await committedHealthy(fault.code),
          { attempt: 1, delivery: 0 },
          "applied on its first try",
        );
        assert.equal(worker.stats.outages, 0, "the worker never paused for an outage");
        assert.equal(worker.paused, false);
        assert.ok(
          logs.lines.some((l) => l.handler === "Faulty" && typeof l.statement === "string"),
          "a log line names the handler and the statement",
        );
      });
    }

    it("a table that a migration creates while the message waits: applied on a retry, nothing dead-lettered", async function () {
      const missingTable = STATEMENT_FAULTS[dialect].find((f) => f.retry === "migration")!;
      skipFor(this, lacking(missingTable));
      const before = worker.stats.committed;
      await publisher.publish("Faulty", "late", { code: "late" });
      await waitUntil(() => worker.stats.committed > before, "the late table's message commits", 20_000);
      await lateCreated;
      const { rows } = await db.raw.query<{ n: number }>(`SELECT COUNT(*) AS n FROM ${late.table}`);
      assert.equal(Number(rows[0]?.n), 1);
      assert.equal(fixture.broker.counts(QUEUE).deadLettered, 0);
      assert.equal(worker.stats.outages, 0);
    });

    /** Why this server cannot raise the row with its own number (Babelfish's one number), or undefined. */
    function lacking(fault: StatementFault): string | undefined {
      const seen = answered.get(fault.code)!;
      const expected = [fault.code, ...(fault.also ?? [])];
      if (seen.codes.some((c) => expected.includes(c))) return undefined;
      if (dialect === "sqlserver" && seen.codes.includes(String(BABELFISH_ERROR)))
        return `the server answers ${BABELFISH_ERROR} for it: ${seen.message}`;
      assert.fail(`${fault.code}: the server answered ${seen.codes.join(", ")} (${seen.message})`);
    }

    /** The healthy message's row once it has committed: the attempt and delivery count it was applied on. */
    async function committedHealthy(code: string): Promise<{ attempt: number; delivery: number }> {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await db.raw.query<{ id: string; attempt: number; delivery: number }>(
          tables.readHealthy(schema),
        );
        const row = rows.find((r) => r.id === code);
        if (row) return { attempt: Number(row.attempt), delivery: Number(row.delivery) };
        if (Date.now() > deadline) throw new Error(`the healthy message of ${code} did not commit`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  });
}

function isLate(body: unknown): boolean {
  return parsedBody(body)?.code === "late";
}
