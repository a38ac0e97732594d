import { parseArgs } from "node:util";

const usage = `usage: sbinbox demo [--count N] [--timeout SECONDS] [--topic | --sessions]

Runs the whole system on embedded defaults: a local broker and an embedded PostgreSQL, two worker processes
competing on one queue, N events (default 2000) with trouble mixed in (resends, a worker killed between commit
and complete, poison messages, a transient failure), then a report. Exit code 0 only if exactly-once held.
The last line is machine-readable: RESULT distinct=... retries=... lost=... doubled=...

  --topic   publish to a topic instead, consumed by two services (billing, two workers; ledger, one), each on its
            own queue (its subscription forwards to it) with its own database, beside a foreign subscription with
            no filter; ledger retries by copies scheduled on its queue; the RESULT line reports each consumer:
            billing.effects=... ledger.retries_scheduled=... audit.messages=...
  --sessions
            per-account sequences on a session-enabled queue (each event numbered within its account, the account
            its session id), the workers in session mode; the RESULT line adds out_of_order=..., the credits applied
            out of their account's order, read from the database
`;

export async function run(argv: string[]): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: argv,
      options: {
        count: { type: "string", default: "2000" },
        timeout: { type: "string", default: "120" },
        topic: { type: "boolean", default: false },
        sessions: { type: "boolean", default: false },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (error) {
    process.stderr.write(`sbinbox demo: ${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  if (values.topic && values.sessions) {
    process.stderr.write("sbinbox demo: --topic and --sessions are two variants: choose one\n");
    return 2;
  }
  const count = Number(values.count);
  const timeout = Number(values.timeout);
  if (!Number.isInteger(count) || count < 10) {
    process.stderr.write("sbinbox demo: --count must be a whole number of at least 10\n");
    return 2;
  }
  if (!Number.isFinite(timeout) || timeout <= 0) {
    process.stderr.write("sbinbox demo: --timeout must be a positive number of seconds\n");
    return 2;
  }
  const tty = process.stdout.isTTY === true;
  let statusShown = false;
  let lastPlain = 0;
  const out = (line: string): void => {
    if (statusShown) process.stdout.write("\n");
    statusShown = false;
    process.stdout.write(line + "\n");
  };
  const status = (line: string): void => {
    if (tty) {
      process.stdout.write(`\r${line}\x1b[K`);
      statusShown = true;
    } else if (Date.now() - lastPlain >= 1_000) {
      lastPlain = Date.now();
      process.stdout.write(line + "\n");
    }
  };
  const { DevPackageMissingError, loadDevPackage } = await import("../app/dev-package.ts");
  try {
    await loadDevPackage("sbinbox demo");
  } catch (error) {
    if (!(error instanceof DevPackageMissingError)) throw error;
    process.stderr.write(`sbinbox demo: ${error.message}\n`);
    return 2;
  }
  const run = values.topic
    ? (await import("../app/demo-topic.ts")).runTopicDemo
    : values.sessions
      ? (await import("../app/demo-sessions.ts")).runSessionsDemo
      : (await import("../app/demo.ts")).runDemo;
  const started = Date.now();
  const { ok, result } = await run({ count, timeoutMs: timeout * 1000, out, status });
  out(`  took                      ${((Date.now() - started) / 1000).toFixed(1)} s`);
  process.stdout.write(result + "\n");
  // Pools and sockets of the children's broker are closed; a backstop so nothing lingering delays the exit.
  setTimeout(() => process.exit(ok ? 0 : 1), 2_000).unref();
  return ok ? 0 : 1;
}
