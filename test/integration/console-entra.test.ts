/**
 * `sbinbox console` against a namespace acts as the operator's own Entra ID sign-in: the real CLI and the real
 * @azure/identity AzureCliCredential, with a stand-in `az` on PATH that answers `az account get-access-token` as the
 * Azure CLI does (a JWT and its expiry). No Azure call is made: the console names its operator before it connects.
 * A managed identity endpoint (IDENTITY_ENDPOINT/IDENTITY_HEADER, as on App Service; a jump VM's IMDS likewise)
 * answers with the VM's app token throughout, and AZURE_TOKEN_CREDENTIALS is not set: the operator must still be
 * the az sign-in, never the machine's identity.
 */
import assert from "node:assert/strict";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { operatorFromToken, pinnedToOperator } from "../../src/servicebus/operator-identity.ts";
import { runCli, startCli } from "../helpers/cli.ts";

const OID = "00000000-0000-4000-8000-0000000000a1";

function jwt(claims: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${part({ alg: "RS256", typ: "JWT" })}.${part(claims)}.c2lnbmF0dXJl`;
}

describe("sbinbox console with SBINBOX_SERVICEBUS_NAMESPACE: the signed-in Entra ID operator", function () {
  this.timeout(60_000);
  let bin: string;
  let identityEndpoint: Server;
  let identityRequests = 0;
  const env = () => ({
    PATH: `${bin}:${process.env.PATH}`,
    AZURE_TOKEN_CREDENTIALS: "",
    IDENTITY_ENDPOINT: `http://127.0.0.1:${(identityEndpoint.address() as AddressInfo).port}/msi/token`,
    IDENTITY_HEADER: "vm-header",
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
    // The machine's managed identity: an app token for whatever is asked (idtyp app, appid, no upn).
    const vmToken = jwt({ idtyp: "app", appid: "vm-mi-appid", oid: "00000000-0000-4000-8000-0000000000f1" });
    identityEndpoint = createServer((_req, res) => {
      identityRequests += 1;
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          access_token: vmToken,
          expires_on: String(Math.floor(Date.now() / 1000) + 3600),
          resource: "https://servicebus.azure.net",
          token_type: "Bearer",
        }),
      );
    });
    await new Promise<void>((resolve) => identityEndpoint.listen(0, "127.0.0.1", resolve));
  });
  after(async () => {
    if (bin) await rm(bin, { recursive: true, force: true });
    await new Promise((resolve) => identityEndpoint?.close(resolve));
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
    assert.doesNotMatch(out, /vm-mi-appid/);
    child.kill("SIGTERM");
    assert.equal((await done).code, 0);
    // The managed identity endpoint was there all along and never asked.
    assert.equal(identityRequests, 0);
  });

  it("refuses an application's token from az (az login --identity, a service principal): sign in as yourself", async function () {
    const token = jwt({ idtyp: "app", appid: "vm-mi-appid", oid: "00000000-0000-4000-8000-0000000000f1" });
    const expires = Math.floor(Date.now() / 1000) + 3600;
    await standInAz(`echo '{"accessToken":"${token}","expires_on":${expires},"tokenType":"Bearer"}'`);
    for (const args of [["console"], ["dlq", "list"]]) {
      const result = await runCli(args, env());
      assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
      assert.match(
        result.stderr,
        /signed in as an application \(app vm-mi-appid: a managed identity or service principal\?\), not a person: sign in as yourself/,
      );
    }
    assert.equal(identityRequests, 0);
  });

  it("refuses a later token that names someone else (az login as another account mid-session)", async function () {
    const tokens = [
      jwt({ upn: "alice@contoso.example", oid: OID }),
      jwt({ upn: "alice@contoso.example", oid: OID }),
      jwt({ upn: "bob@contoso.example", oid: "00000000-0000-4000-8000-0000000000b2" }),
    ];
    const az = {
      getToken: () => Promise.resolve({ token: tokens.shift()!, expiresOnTimestamp: Date.now() + 3600_000 }),
    };
    const pinned = pinnedToOperator(az, operatorFromToken(tokens.shift()!));
    assert.ok(await pinned.getToken("https://storage.azure.com/.default"));
    await assert.rejects(
      pinned.getToken("https://servicebus.azure.net/.default"),
      new RegExp(
        `sign-in changed from alice@contoso\\.example \\(${OID}\\) to bob@contoso\\.example .*restart`,
      ),
    );
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

  it("refuses --operator against a namespace, before any sign-in: the audit names the Entra ID sign-in, not a typed name", async function () {
    await standInAz(`echo called >&2; exit 9`);
    for (const args of [
      ["console", "--operator", "mallory"],
      ["dlq", "list", "--operator", "mallory"],
    ]) {
      const result = await runCli(args, env());
      assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
      assert.match(
        result.stderr,
        /--operator "mallory" refused with SBINBOX_SERVICEBUS_NAMESPACE: .*your own Entra ID sign-in/,
      );
      assert.doesNotMatch(result.stderr, /called/);
    }
  });

  it("serves loopback only: --host elsewhere is refused before any sign-in (the link would be a shared secret)", async function () {
    await standInAz(`echo called >&2; exit 9`);
    const result = await runCli(["console", "--host", "0.0.0.0"], env());
    assert.equal(result.code, 2);
    assert.match(result.stderr, /refused: --host 0\.0\.0\.0 with SBINBOX_SERVICEBUS_NAMESPACE: .*SSH tunnel/);
    assert.doesNotMatch(result.stderr, /called/);
  });

  it("reads who a token names: the user; refuses an application and what is not a JWT", function () {
    assert.deepEqual(operatorFromToken(jwt({ upn: "a@b.example", oid: OID, tid: "t" })), {
      name: "a@b.example",
      objectId: OID,
      tenantId: "t",
      label: `a@b.example (${OID})`,
    });
    // A guest's token may carry no upn: preferred_username, then unique_name.
    assert.equal(operatorFromToken(jwt({ preferred_username: "g@x.example", oid: OID })).name, "g@x.example");
    // An application (a managed identity, a service principal) is refused, never named as an operator.
    assert.throws(
      () => operatorFromToken(jwt({ appid: "app-1", oid: OID })),
      /signed in as an application \(app app-1/,
    );
    assert.throws(
      () => operatorFromToken(jwt({ idtyp: "app", unique_name: "x", appid: "app-2" })),
      /signed in as an application/,
    );
    assert.throws(() => operatorFromToken("not-a-token"), /not a JWT/);
    assert.throws(() => operatorFromToken(jwt({ aud: "x" })), /signed in as an application \(no user claims/);
  });
});
