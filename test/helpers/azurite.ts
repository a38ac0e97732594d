import { spawn, type ChildProcess } from "node:child_process";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/** Azurite's published development account (the same in every install, documented by Microsoft): tests only. */
export const AZURITE_ACCOUNT = "devstoreaccount1";
export const AZURITE_KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

export interface AzuriteFixture {
  /** http://127.0.0.1:<port>/devstoreaccount1 */
  readonly blobEndpoint: string;
  connectionString(key?: string): string;
}

/**
 * Starts Azurite's blob service (the azurite devDependency, a plain npm package: no Docker) for the enclosing
 * describe, on 127.0.0.1 and a free port, in memory, and stops it after.
 */
export function useAzurite(): AzuriteFixture {
  let child: ChildProcess | undefined;
  let endpoint: string | undefined;
  before(async function () {
    this.timeout(30_000);
    const bin = join(
      dirname(createRequire(import.meta.url).resolve("azurite/package.json")),
      "dist/src/blob/main.js",
    );
    child = spawn(
      process.execPath,
      [bin, "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence", "--skipApiVersionCheck"],
      // In a temporary directory: whatever Azurite writes beside it stays out of the checkout.
      { stdio: ["ignore", "pipe", "pipe"], cwd: tmpdir() },
    );
    endpoint = await new Promise<string>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`azurite did not start:\n${out}`)), 25_000);
      child!.stdout!.on("data", (chunk: Buffer) => {
        out += chunk.toString();
        const port = /listens on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)?.[1];
        if (port) {
          clearTimeout(timer);
          resolve(`http://127.0.0.1:${port}/${AZURITE_ACCOUNT}`);
        }
      });
      child!.stderr!.on("data", (chunk: Buffer) => (out += chunk.toString()));
      child!.once("exit", (code) => reject(new Error(`azurite exited ${code}:\n${out}`)));
    });
  });
  after(async () => {
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child!.once("exit", resolve));
    // SIGKILL: on SIGTERM Azurite waits for every keep-alive connection (the SDK's, in this process) to close, about
    // two minutes; it holds nothing on disk (in memory), so nothing is lost.
    child.kill("SIGKILL");
    await exited;
  });
  return {
    get blobEndpoint() {
      if (!endpoint) throw new Error("azurite not started yet: use it inside a test or hook");
      return endpoint;
    },
    connectionString(key = AZURITE_KEY) {
      return `DefaultEndpointsProtocol=http;AccountName=${AZURITE_ACCOUNT};AccountKey=${key};BlobEndpoint=${this.blobEndpoint};`;
    },
  };
}
