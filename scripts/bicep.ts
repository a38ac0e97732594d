/**
 * The Bicep CLI as the project pins it: tools/bicep/bicep.csproj names the NuGet package and its exact version;
 * `dotnet restore` downloads it into tools/bicep/obj/packages the first time it is needed.
 */
import { execFile } from "node:child_process";
import { access, chmod, constants, readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = dirname(dirname(fileURLToPath(import.meta.url)));
const projectFile = join(repoRoot, "tools", "bicep", "bicep.csproj");
const packagesDir = join(repoRoot, "tools", "bicep", "obj", "packages");
const packageId = "Azure.Bicep.CommandLine.linux-x64";

/**
 * The bicepparam files read who administers SQL from the environment at deploy time; building them needs some
 * value, so checks and tests supply these obviously fake ones unless real ones are set.
 */
export const placeholderDeployEnv: Readonly<Record<string, string>> = {
  SQL_ADMIN_LOGIN: "sbinbox-sql-admins",
  SQL_ADMIN_OBJECT_ID: "00000000-0000-0000-0000-000000000000",
};

export interface BicepResult {
  code: number;
  stdout: string;
  stderr: string;
}

async function pinnedVersion(): Promise<string> {
  const csproj = await readFile(projectFile, "utf8");
  const match = /PackageDownload Include="Azure\.Bicep\.CommandLine\.linux-x64" Version="\[([^\]]+)\]"/.exec(
    csproj,
  );
  if (!match?.[1]) throw new Error(`${projectFile}: no exact PackageDownload version for ${packageId}`);
  return match[1];
}

function run(file: string, args: string[], env?: NodeJS.ProcessEnv): Promise<BicepResult> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd: repoRoot, env, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== "number") {
        reject(new Error(`${file} could not be run: ${error.message}`, { cause: error }));
        return;
      }
      resolve({ code: typeof error?.code === "number" ? error.code : 0, stdout, stderr });
    });
  });
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path, constants.F_OK);
    return true;
  } catch {
    return false;
  }
}

let resolved: Promise<string> | undefined;

/** Path of the bicep binary, restoring the package first when it is missing. */
export function ensureBicep(): Promise<string> {
  resolved ??= (async () => {
    const version = await pinnedVersion();
    const binary = join(packagesDir, packageId.toLowerCase(), version, "tools", "bicep");
    if (!(await exists(binary))) {
      const restore = await run("dotnet", [
        "restore",
        projectFile,
        "--packages",
        packagesDir,
        "--verbosity",
        "quiet",
      ]);
      if (restore.code !== 0 || !(await exists(binary))) {
        throw new Error(
          `dotnet restore of ${packageId} ${version} failed:\n${restore.stdout}${restore.stderr}`,
        );
      }
    }
    // NuGet does not keep the executable bit of files it extracts.
    await chmod(binary, 0o755);
    return binary;
  })();
  return resolved;
}

/** Runs the pinned Bicep CLI from the repository root. */
export async function runBicep(args: string[], extraEnv: Record<string, string> = {}): Promise<BicepResult> {
  const binary = await ensureBicep();
  return run(binary, args, {
    ...placeholderDeployEnv,
    ...process.env,
    ...extraEnv,
    // Keeps the CLI from writing telemetry or first-run notices into the output the checks read.
    DOTNET_CLI_TELEMETRY_OPTOUT: "1",
    BICEP_TRACING_ENABLED: "false",
  });
}
