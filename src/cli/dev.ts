import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { EmbeddedPostgresServer, LocalBroker } from "sbinbox-dev";
import { devPackageOrSay, untilSignal } from "./dev-tools.ts";

const usage = `usage: sbinbox dev [--data .sbinbox] [--port 5672] [--postgres-port 55432]

Local development: runs the local Service Bus broker (in memory) and a PostgreSQL whose data is kept in
<data>/postgres between runs, and prints the two settings that point \`sbinbox migrate\`, \`sbinbox worker\` and
\`sbinbox publish\` at them (also written to <data>/env, for \`set -a; . .sbinbox/env; set +a\`). Runs until SIGINT or
SIGTERM, then stops both; the database stays. A port of 0 takes any free one (the URL then changes between runs).
`;

const PORT_RANGE = "an integer from 0 to 65535";

/** `sbinbox dev`: the broker and a persistent PostgreSQL, for a worker and a migrate started separately. */
export async function run(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        data: { type: "string", default: ".sbinbox" },
        port: { type: "string", default: "5672" },
        "postgres-port": { type: "string", default: "55432" },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    }));
  } catch (error) {
    process.stderr.write(`sbinbox dev: ${(error as Error).message}\n\n${usage}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  const ports: Record<string, number> = {};
  for (const flag of ["port", "postgres-port"] as const) {
    const port = Number(values[flag]);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      process.stderr.write(`sbinbox dev: --${flag} must be ${PORT_RANGE} (got "${values[flag]}")\n`);
      return 2;
    }
    ports[flag] = port;
  }
  const dev = await devPackageOrSay("dev");
  if (!dev) return 2;
  const data = resolve(values.data);
  const pgData = join(data, "postgres");
  await mkdir(pgData, { recursive: true });
  let broker: LocalBroker | undefined;
  let postgres: EmbeddedPostgresServer | undefined;
  try {
    broker = await dev.LocalBroker.start({ port: ports.port, host: "127.0.0.1" });
    // A port the earlier run's URL names, unless 0: the team's own settings keep working across runs.
    postgres = await dev.EmbeddedPostgresServer.create({
      dataDir: pgData,
      ...(ports["postgres-port"] ? { port: ports["postgres-port"] } : {}),
    });
  } catch (error) {
    // The broker starts first: once it runs, a port in use is PostgreSQL's.
    const flag = broker ? "--postgres-port" : "--port";
    const inUse =
      (error as { code?: unknown }).code === "EADDRINUSE" || /in use/i.test((error as Error).message);
    await broker?.stop();
    const hint = inUse
      ? ` (another program has the port: pick another with ${flag} N, or ${flag} 0 for any free one)`
      : "";
    process.stderr.write(`sbinbox dev: cannot start: ${(error as Error).message}${hint}\n`);
    return 1;
  }
  const env = {
    SBINBOX_SERVICEBUS_CONNECTION_STRING: broker.connectionString,
    SBINBOX_POSTGRES_URL: postgres.url(),
  };
  const lines = Object.entries(env).map(([k, v]) => `${k}='${v}'`);
  await writeFile(join(data, "env"), `${lines.join("\n")}\n`);
  process.stdout.write(
    [
      `Local Service Bus broker on 127.0.0.1:${broker.port} (queue ${broker.queueNames.join(", ")}, in memory)`,
      `PostgreSQL on 127.0.0.1:${postgres.port}, data kept in ${pgData}`,
      "",
      ...lines.map((l) => `export ${l}`),
      "",
      `(also in ${join(data, "env")}). In another shell, with those set: npx sbinbox migrate, then npx sbinbox worker`,
      "",
    ].join("\n"),
  );
  await untilSignal();
  await broker.stop();
  await postgres.stop();
  process.stdout.write("stopped; the database is kept\n");
  return 0;
}
