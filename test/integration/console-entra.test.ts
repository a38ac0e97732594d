/**
 * `sbinbox console` against a namespace acts as the operator's own Entra ID sign-in: the real CLI and the real
 * @azure/identity AzureCliCredential, with a stand-in `az` on PATH that answers `az account get-access-token` as the
 * Azure CLI does (a JWT and its expiry). No Azure call is made: the console names its operator before it connects.
 */
import assert from "node:assert/strict";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { operatorFromToken } from "../../src/servicebus/operator-identity.ts";
import { runCli, startCli } from "../helpers/cli.ts";

const OID = "00000000-0000-4000-8000-0000000000a1";

function jwt(claims: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${part({ alg: "RS256", typ: "JWT" })}.${part(claims)}.c2lnbmF0dXJl`;
}

describe("sbinbox console with SBINBOX_SERVICEBUS_NAMESPACE: the signed-in Entra ID operator", function () {
  this.timeout(60_000);
  let bin: string;
  const env = () => ({
    PATH: `${bin}:${process.env.PATH}`,
    AZURE_TOKEN_CREDENTIALS: "AzureCliCredential",
    SBINBOX_SERVICEBUS_NAMESPACE: "sb-test.servicebus.windows.net",
    SBINBOX_QUEUE: "notes",
    SBINBOX_HANDLERS: "./test/fixtures/memo-handlers/index.ts",
  });
  const standInAz = async (script: string) => {
    await writeFile(join(bin, "az"), `#!/bin/sh\n${script}\n`);
    await chmod(join(bin, "az"), 0o755);
  };

  before(async () => {
    bin = await mkdtemp(join(tmpdir(), "sbinbox-az-"));
  });
  after(async () => {
    if (bin) await rm(bin, { recursive: true, force: true });
  });

  it("names the operator from the token (upn and object id) in its start line", async function () {
    const token = jwt({
      upn: "alice@contoso.example",
      oid: OID,
      tid: "t-1",
      aud: "https://servicebus.azure.net",
    });
    const expires = Math.floor(Date.now() / 1000) + 3600;
    await standInAz(
      `case "$*" in *get-access-token*servicebus.azure.net*) echo '{"accessToken":"${token}","expires_on":${expires},"tokenType":"Bearer"}';; *) echo "unexpected: $*" >&2; exit 9;; esac`,
    );
    const { child, done } = startCli(["console"], env());
    let out = "";
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        if (out.includes("Ctrl-C")) resolve();
      });
      void done.then((r) => reject(new Error(`exited ${r.code}: ${r.stderr}`)));
    });
    assert.match(out, new RegExp(`one-time sign-in link for alice@contoso\\.example \\(${OID}\\)`));
    child.kill("SIGTERM");
    assert.equal((await done).code, 0);
  });

  it("refuses to start without a sign-in, saying how to sign in", async function () {
    await standInAz(`echo "ERROR: Please run 'az login' to setup account." >&2; exit 1`);
    const result = await runCli(["console"], env());
    assert.equal(result.code, 2, result.stderr);
    assert.match(
      result.stderr,
      /no Entra ID sign-in for Service Bus: .*az login --use-device-code on a jump box/,
    );
  });

  it("serves loopback only: --host elsewhere is refused before any sign-in (the link would be a shared secret)", async function () {
    await standInAz(`echo called >&2; exit 9`);
    const result = await runCli(["console", "--host", "0.0.0.0"], env());
    assert.equal(result.code, 2);
    assert.match(result.stderr, /refused: --host 0\.0\.0\.0 with SBINBOX_SERVICEBUS_NAMESPACE: .*SSH tunnel/);
    assert.doesNotMatch(result.stderr, /called/);
  });

  it("reads who a token names: the user, an application, and refuses what is not a JWT", function () {
    assert.deepEqual(operatorFromToken(jwt({ upn: "a@b.example", oid: OID, tid: "t" })), {
      name: "a@b.example",
      objectId: OID,
      tenantId: "t",
      label: `a@b.example (${OID})`,
    });
    // A guest's token may carry no upn: preferred_username, then unique_name.
    assert.equal(operatorFromToken(jwt({ preferred_username: "g@x.example", oid: OID })).name, "g@x.example");
    assert.equal(operatorFromToken(jwt({ appid: "app-1", oid: OID })).label, `app app-1 (${OID})`);
    assert.throws(() => operatorFromToken("not-a-token"), /not a JWT/);
    assert.throws(() => operatorFromToken(jwt({ aud: "x" })), /names no user or application/);
  });
});
