// `npm run test:dotnet`: starts the local broker in this process and runs tools/sb-client, Microsoft's .NET
// Service Bus SDK driving the core scenarios against it, so the broker is checked by a second, independent
// client. Builds the tool on first use (NuGet restore); later runs reuse the build. Exits non-zero on failure.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalBroker } from "../src/localbroker/broker.ts";
import { consoleLogger } from "../src/localbroker/logger.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const toolDir = join(root, "tools", "sb-client");
const toolOut = join(toolDir, "bin", "out");
const toolBinary = join(toolOut, "sb-client");
const dotnetEnv = { ...process.env, DOTNET_CLI_TELEMETRY_OPTOUT: "1", DOTNET_NOLOGO: "1" };

function ensureTool(): void {
  const newest = Math.max(
    ...["Program.cs", "sb-client.csproj"].map((f) => statSync(join(toolDir, f)).mtimeMs),
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
  const broker = await LocalBroker.start({ port: 0, logger: consoleLogger(false) });
  try {
    const child = spawn(toolBinary, [broker.connectionString, "sbinbox"], {
      stdio: "inherit",
      env: dotnetEnv,
    });
    const code = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error("tools/sb-client did not finish within 120 s"));
      }, 120_000);
      child.on("error", reject);
      child.on("exit", (status) => {
        clearTimeout(timer);
        resolve(status ?? 1);
      });
    });
    process.stdout.write(
      code === 0
        ? "test:dotnet: the .NET client's scenarios passed\n"
        : `test:dotnet: FAILED (exit ${code})\n`,
    );
    return code;
  } finally {
    await broker.stop();
  }
}

process.exitCode = await main();
