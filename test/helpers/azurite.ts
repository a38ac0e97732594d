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
export function useAzurite(
  options: {
    /** Serve HTTPS with this certificate and key (PEM files), as the CLI requires of an archive URL. */
    readonly tls?: () => { readonly cert: string; readonly key: string };
    /** Accept Entra ID bearer tokens (Azurite's `--oauth basic`: issuer and audience checked, not the signature). */
    readonly oauth?: boolean;
  } = {},
): AzuriteFixture {
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
      [
        bin,
        ...["--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence", "--skipApiVersionCheck"],
        ...(options.tls ? ["--cert", options.tls().cert, "--key", options.tls().key] : []),
        ...(options.oauth ? ["--oauth", "basic"] : []),
      ],
      // In a temporary directory: whatever Azurite writes beside it stays out of the checkout.
      { stdio: ["ignore", "pipe", "pipe"], cwd: tmpdir() },
    );
    endpoint = await new Promise<string>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`azurite did not start:\n${out}`)), 25_000);
      child!.stdout!.on("data", (chunk: Buffer) => {
        out += chunk.toString();
        const [, scheme, port] = /listens on (https?):\/\/127\.0\.0\.1:(\d+)/.exec(out) ?? [];
        if (port) {
          clearTimeout(timer);
          resolve(`${scheme}://127.0.0.1:${port}/${AZURITE_ACCOUNT}`);
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
      return `DefaultEndpointsProtocol=${this.blobEndpoint.split(":")[0]};AccountName=${AZURITE_ACCOUNT};AccountKey=${key};BlobEndpoint=${this.blobEndpoint};`;
    },
  };
}
