// `npm run test:dotnet`: starts the local broker in this process and runs tools/sb-client, Microsoft's .NET
// Service Bus SDK driving the behaviours a .NET service uses (prefetch in both receive modes, the processor, peek,
// deferral, scheduling, dead-letter, lock renewal, the size cap, sessions), so the broker is checked by a second,
// independent client. Afterwards every queue must be empty: a message lost or stuck fails the run. Builds the
// tool on first use (NuGet restore); later runs reuse the build. Exits non-zero on failure.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { parseConfig } from "../src/localbroker/config.ts";
import { serviceTopic } from "../src/localbroker/service-topic.ts";
import { consoleLogger } from "../src/localbroker/logger.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const toolDir = join(root, "tools", "sb-client");
const toolOut = join(toolDir, "bin", "out");
const toolBinary = join(toolOut, "sb-client");
const dotnetEnv = { ...process.env, DOTNET_CLI_TELEMETRY_OPTOUT: "1", DOTNET_NOLOGO: "1" };

function ensureTool(): void {
  const newest = Math.max(
    ...["Program.cs", "Sessions.cs", "sb-client.csproj"].map((f) => statSync(join(toolDir, f)).mtimeMs),
  );
  if (existsSync(toolBinary) && statSync(toolBinary).mtimeMs >= newest) return;
  process.stderr.write("test:dotnet: building tools/sb-client (dotnet build)\n");
  const build = spawnSync(
    "dotnet",
    ["build", toolDir, "-c", "Release", "-o", toolOut, "--nologo", "-v", "quiet"],
    {
      stdio: "inherit",
      env: dotnetEnv,
    },
  );
  if (build.error || build.status !== 0)
    throw new Error(
      `dotnet build of tools/sb-client failed (${build.error?.message ?? `exit ${build.status}`})`,
    );
}

async function main(): Promise<number> {
  ensureTool();
  const config = parseConfig({
    UserConfig: {
      Namespaces: [
        {
          Name: "dotnet-check",
          Queues: [
            // Its duplicate-detection scenario needs it on: a config file's default is off, as on Azure.
            { Name: "sbinbox", Properties: { RequiresDuplicateDetection: true } },
            // tools/sb-client runs each prefetch scenario on a queue of its own (one scenario's stranded messages
            // must not fail the next).
            ...["peeklock", "receiveanddelete"].flatMap((mode) =>
              [0, 1, 5, 100].map((prefetch) => ({ Name: `sbinbox-${mode}-${prefetch}`, Properties: {} })),
            ),
            { Name: "sbinbox-sessions", Properties: { RequiresSession: true } },
            { Name: "sbinbox-sessions-processor", Properties: { RequiresSession: true } },
            {
              Name: "sbinbox-capped",
              Properties: { MaxSizeInMegabytes: 1, RequiresDuplicateDetection: false },
            },
          ],
        },
      ],
    },
  });
  // As sbinbox deploys a topic: each service's subscription forwards to its queue (tools/sb-client's topic scenario).
  const { topic, queues } = serviceTopic("sbinbox-topic", ["billing", "ledger"]);
  config.queues.push(...queues);
  config.topics = [topic];
  // The broker's own record of the receivers it refused: the .NET SDK's receive on a forwarding subscription
  // returns nothing instead of throwing, and nothing is what an accepted receiver would get too (everything is
  // forwarded before it attaches), so the refusal itself is checked here.
  const logger = consoleLogger(false);
  const refused: string[] = [];
  const REFUSAL = /^refusing a receiver on (\S+): /;
  const broker = await LocalBroker.start({
    port: 0,
    host: "127.0.0.1",
    config,
    logger: {
      ...logger,
      debug: (message) => {
        const entity = REFUSAL.exec(message)?.[1];
        if (entity) refused.push(entity);
        logger.debug(message);
      },
    },
  });
  try {
    const started = Date.now();
    const child = spawn(
      toolBinary,
      [broker.connectionString, "sbinbox", "sbinbox-capped", "sbinbox-topic", "sbinbox-sessions"],
      {
        stdio: "inherit",
        env: dotnetEnv,
      },
    );
    const code = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error("tools/sb-client did not finish within 150 s"));
      }, 150_000);
      child.on("error", reject);
      child.on("exit", (status) => {
        clearTimeout(timer);
        resolve(status ?? 1);
      });
    });
    // The broker's own count, independent of what the client saw: nothing may be left in any state.
    const entities = [
      ...config.queues.map((q) => q.name),
      ...config.topics.flatMap((t) => t.subscriptions.map((sub) => sub.queue.name)),
    ];
    const leftovers = entities.flatMap((name) => {
      const { active, locked, scheduled, deferred, deadLettered } = broker.counts(name);
      const total = active + locked + scheduled + deferred + deadLettered;
      return total === 0
        ? []
        : [
            `${name}: active ${active}, locked ${locked}, scheduled ${scheduled}, deferred ${deferred}, dead-lettered ${deadLettered}`,
          ];
    });
    for (const line of leftovers) process.stdout.write(`test:dotnet: left in the broker: ${line}\n`);
    const forwarding = `${topic.name}/Subscriptions/billing`;
    const refusedOk = refused.includes(forwarding);
    if (!refusedOk)
      process.stdout.write(
        `test:dotnet: the broker refused no receiver on ${forwarding} (refused: ${refused.join(", ") || "none"})\n`,
      );
    const ok = code === 0 && leftovers.length === 0 && refusedOk;
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    process.stdout.write(
      ok
        ? `test:dotnet: the .NET client's scenarios passed in ${seconds} s\n`
        : `test:dotnet: FAILED (exit ${code}, ${leftovers.length} queue(s) not empty, forwarding refusal ${refusedOk ? "seen" : "missing"})\n`,
    );
    return ok ? 0 : 1;
  } finally {
    await broker.stop();
  }
}

process.exitCode = await main();
