/**
 * infra/scripts/postprovision.sh against stand-ins: `az` records what it is asked, and the `sbinbox migrate` process
 * (the script's only SQL client: GitHub's ubuntu-24.04 runners ship no sqlcmd) answers its first attempts the way
 * it does when Azure SQL's firewall has not applied the new rule yet: error 40615's text and exit code 75.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import mssql from "mssql";
import * as tedious from "tedious";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import { FIREWALL_EXIT_CODE, PUBLIC_ACCESS_EXIT_CODE, run as migrate } from "../../src/cli/migrate.ts";
import { isFirewallRefusal } from "../../src/inbox/sqlserver/app-user.ts";
import { isPublicAccessRefusal } from "../../src/inbox/sqlserver/public-access.ts";
import { sqlServerErrorChain } from "../../src/inbox/sqlserver/error-chain.ts";

const script = fileURLToPath(new URL("../../infra/scripts/postprovision.sh", import.meta.url));
const CLIENT_ID = "01020304-0506-0708-090a-0b0c0d0e0f10";
const LIST =
  "az sql server firewall-rule list --resource-group rg-sbinbox-dev --server sql-sbinbox-x --query [?starts_with(name, 'postprovision-')].[name, startIpAddress] --output tsv";
// Error 40615 as Azure SQL words it (learn.microsoft.com, "Troubleshoot connectivity issues").
const REFUSAL =
  "Cannot open server 'sql-sbinbox-x' requested by the login. Client with IP address '203.0.113.7' is not " +
  "allowed to access the server. To enable access, use the Azure Management Portal or run sp_set_firewall_rule " +
  "on the master database to create a firewall rule for this IP address or address range. It may take up to " +
  "five minutes for this change to take effect.";
// Error 47073 as Azure SQL words it when public network access is off ("Azure SQL connectivity settings").
const PUBLIC_ACCESS_OFF =
  "Reason: An instance-specific error occurred while establishing a connection to SQL Server. Connection was " +
  "denied since Deny Public Network Access is set to Yes " +
  "(https://docs.microsoft.com/azure/azure-sql/database/connectivity-settings#deny-public-network-access). To " +
  "connect to this server, use the Private Endpoint from inside your virtual network " +
  "(https://docs.microsoft.com/azure/sql-database/sql-database-private-endpoint-overview#how-to-set-up-private-link-for-azure-sql-database).";

interface Run {
  code: number;
  stderr: string;
  log: string[];
}

describe("infra/scripts/postprovision.sh against stand-ins for az and the SQL connection", function () {
  this.timeout(60_000);
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-postprovision-"));
    const bin = join(dir, "bin");
    await mkdir(bin);
    await mkdir(join(dir, "package", "node_modules"), { recursive: true });
    await mkdir(join(dir, "package", "dist-handlers"), { recursive: true });
    await writeFile(join(dir, "package", "dist-handlers", "index.js"), "export default {};\n");
    await writeFile(
      join(bin, "az"),
      `#!/usr/bin/env bash
echo "az $*" >> "$STANDIN_LOG"
if [ "$1 $2" = "account show" ]; then echo deployer@example.com; fi
if [ "$1 $2 $3 $4" = "sql server firewall-rule list" ]; then printf '%b' "\${STANDIN_RULES:-}"; fi
`,
    );
    await writeFile(
      join(bin, "node"),
      `#!/usr/bin/env bash
if [ "$1 $2" = "bin/sbinbox.js migrate" ]; then
  shift 2
  echo "migrate $* handlers=$SBINBOX_HANDLERS cwd=$PWD" >> "$STANDIN_LOG"
  echo "\${AZURE_TOKEN_CREDENTIALS:-unset}" > "$STANDIN_DIR/credentials"
  n=$(( $(cat "$STANDIN_DIR/attempts" 2>/dev/null || echo 0) + 1 ))
  echo "$n" > "$STANDIN_DIR/attempts"
  if [ "$n" -le "$STANDIN_REFUSALS" ]; then
    echo "sbinbox migrate: the SQL server's firewall refused this machine (error 40615): $STANDIN_REFUSAL" >&2
    exit 75
  fi
  exit "\${STANDIN_MIGRATE_EXIT:-0}"
fi
exec "${process.execPath}" "$@"
`,
    );
    await chmod(join(bin, "az"), 0o755);
    await chmod(join(bin, "node"), 0o755);
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  function start(env: Record<string, string>, args: string[] = []): Promise<Run> {
    const log = join(dir, "log");
    const base: Record<string, string> = {
      PATH: `${join(dir, "bin")}:${process.env.PATH ?? ""}`,
      HOME: dir,
      STANDIN_LOG: log,
      STANDIN_DIR: dir,
      STANDIN_REFUSAL: REFUSAL,
      STANDIN_REFUSALS: "0",
      // Output names in the cases ARM may return them in.
      azure_resource_group: "rg-sbinbox-dev",
      Sql_Server_Name: "sql-sbinbox-x",
      SQL_SERVER_FQDN: "sql-sbinbox-x.database.windows.net",
      sql_database_name: "sbinbox",
      worker_IDENTITY_name: "id-sbinbox-worker-x",
      WORKER_IDENTITY_CLIENT_ID: CLIENT_ID,
      SBINBOX_CLIENT_IP: "203.0.113.7",
      SBINBOX_PACKAGE_DIR: join(dir, "package"),
      SBINBOX_SQL_RETRY_SECONDS: "0",
      SBINBOX_SQL_WAIT_SECONDS: "60",
    };
    return new Promise((resolve) => {
      execFile("bash", [script, ...args], { env: { ...base, ...env } }, (error, _stdout, stderr) => {
        void readFile(log, "utf8")
          .catch(() => "")
          .then((text) =>
            resolve({
              code: error ? Number((error as { code?: number }).code ?? 1) : 0,
              stderr,
              log: text.trim().split("\n").filter(Boolean),
            }),
          );
      });
    });
  }

  it("signs in to SQL as the Azure CLI's login only, never as a managed identity of the machine", async function () {
    const result = await start({ AZURE_TOKEN_CREDENTIALS: "ManagedIdentityCredential" });
    assert.equal(result.code, 0, result.stderr);
    assert.equal((await readFile(join(dir, "credentials"), "utf8")).trim(), "AzureCliCredential");
  });

  it("opens the firewall, retries while the rule is not applied yet, then removes the rule", async function () {
    const result = await start({ STANDIN_REFUSALS: "2" });
    assert.equal(result.code, 0, result.stderr);
    const migrate = `migrate --app-user id-sbinbox-worker-x --app-client-id ${CLIENT_ID} handlers=./dist-handlers/index.js cwd=${join(dir, "package")}`;
    const rule = /--name (postprovision-\d+)/.exec(result.log[2] ?? "")?.[1];
    assert.ok(rule, result.log.join("\n"));
    assert.deepEqual(result.log, [
      "az account show --query user.name --output tsv",
      LIST,
      `az sql server firewall-rule create --resource-group rg-sbinbox-dev --server sql-sbinbox-x --name ${rule} --start-ip-address 203.0.113.7 --end-ip-address 203.0.113.7 --output none`,
      migrate,
      migrate,
      migrate,
      `az sql server firewall-rule delete --resource-group rg-sbinbox-dev --server sql-sbinbox-x --name ${rule} --output none`,
    ]);
    assert.match(result.stderr, /attempt 1 refused by the SQL firewall/);
    assert.match(result.stderr, /attempt 2 refused by the SQL firewall/);
  });

  it("with no client address set, fails at the first refusal instead of waiting for a rule it never made", async function () {
    const result = await start({ STANDIN_REFUSALS: "1000", SBINBOX_CLIENT_IP: "" });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /no rule was made for it: set SBINBOX_CLIENT_IP/);
    assert.equal(result.log.filter((l) => l.startsWith("migrate")).length, 1);
    assert.ok(!result.log.some((l) => /firewall-rule/.test(l)), result.log.join("\n"));
  });

  it("on the private network, opens no firewall rule and says to run from inside it", async function () {
    const result = await start({ STANDIN_REFUSALS: "1000", PRIVATE_NETWORK: "True" });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /private network: no firewall rule/);
    assert.match(result.stderr, /public access is off: run this from inside the virtual network/);
    assert.ok(!result.log.some((l) => /firewall-rule/.test(l)), result.log.join("\n"));
    await rm(join(dir, "log"), { force: true });
    const clean = await start({ PRIVATE_NETWORK: "true" }, ["--cleanup"]);
    assert.equal(clean.code, 0, clean.stderr);
    assert.ok(!clean.log.some((l) => /firewall-rule/.test(l)));
  });

  it("deletes a killed run's stale postprovision-* rules before opening its own, and no other rule", async function () {
    const now = Math.floor(Date.now() / 1000);
    const rules = [
      `postprovision-${now - 3 * 3600}\t198.51.100.1`, // stale: another machine's, three hours old
      `postprovision-${now - 60}\t198.51.100.2`, // a run in progress elsewhere
      `allow-0\t20.1.2.3`, // the worker's (the list query returns postprovision-* only; this one proves the name check)
    ].join("\\n");
    const result = await start({ STANDIN_RULES: `${rules}\\n` });
    assert.equal(result.code, 0, result.stderr);
    const deletes = result.log.filter((l) => /firewall-rule delete/.test(l));
    assert.equal(deletes.length, 2, result.log.join("\n"));
    assert.match(deletes[0]!, new RegExp(`--name postprovision-${now - 3 * 3600} `));
    assert.match(deletes[1]!, /--name postprovision-\d+ --output none$/);
    assert.doesNotMatch(
      result.log.join("\n"),
      new RegExp(`delete .*postprovision-${now - 60}|delete .*allow-0`),
    );
  });

  it("--cleanup deletes this machine's rules and stale ones, and does nothing before the deployment's outputs exist", async function () {
    const now = Math.floor(Date.now() / 1000);
    const rules = [
      `postprovision-${now - 30}\t203.0.113.7`, // this runner's, left by a cancelled step
      `postprovision-${now - 30}\t198.51.100.2`,
      `postprovision-${now - 9000}\t198.51.100.3`,
    ].join("\\n");
    const result = await start({ STANDIN_RULES: `${rules}\\n` }, ["--cleanup"]);
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(
      result.log.filter((l) => /firewall-rule delete/.test(l)).map((l) => /--name (\S+)/.exec(l)![1]),
      [`postprovision-${now - 30}`, `postprovision-${now - 9000}`],
    );
    assert.ok(!result.log.some((l) => l.startsWith("migrate")), "no migration in clean-up");
    await rm(join(dir, "log"), { force: true });
    const early = await start({ azure_resource_group: "" }, ["--cleanup"]);
    assert.equal(early.code, 0, early.stderr);
    assert.match(early.stderr, /no rule to delete/);
    assert.deepEqual(early.log, []);
  });

  it("gives up after its bound, still removing the rule", async function () {
    const result = await start({ STANDIN_REFUSALS: "1000", SBINBOX_SQL_WAIT_SECONDS: "0" });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /still refuses this machine after 0s \(1 attempts\)/);
    assert.equal(result.log.filter((l) => l.startsWith("migrate")).length, 1);
    assert.match(result.log.at(-1) ?? "", /firewall-rule delete/);
  });

  it("a server with public access off (migrate's exit 77): says to run from inside the network, at once", async function () {
    const result = await start({ STANDIN_MIGRATE_EXIT: "77", PRIVATE_NETWORK: "true" });
    assert.equal(result.code, 77, result.stderr);
    assert.match(result.stderr, /public network access is off: run this from inside the virtual network/);
    assert.equal(result.log.filter((l) => l.startsWith("migrate")).length, 1);
    // The same without the output (a server switched by hand): a rule was made, and it is removed.
    await rm(join(dir, "log"), { force: true });
    const manual = await start({ STANDIN_MIGRATE_EXIT: "77" });
    assert.equal(manual.code, 77, manual.stderr);
    assert.match(manual.stderr, /public network access is off/);
    assert.equal(manual.log.filter((l) => l.startsWith("migrate")).length, 1);
    assert.match(manual.log.at(-1) ?? "", /firewall-rule delete/);
  });

  it("does not retry a failure the firewall did not cause", async function () {
    const result = await start({ STANDIN_MIGRATE_EXIT: "1" });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /sbinbox migrate failed \(exit 1\)/);
    assert.equal(result.log.filter((l) => l.startsWith("migrate")).length, 1);
    assert.match(result.log.at(-1) ?? "", /firewall-rule delete/);
  });

  for (const [setting, value] of [
    ["SBINBOX_SQL_WAIT_SECONDS", "10m"],
    ["SBINBOX_SQL_WAIT_SECONDS", "abc"],
    ["SBINBOX_SQL_WAIT_SECONDS", "1e3"],
    ["SBINBOX_SQL_RETRY_SECONDS", "-1"],
    ["SBINBOX_SQL_RETRY_SECONDS", "2.5"],
  ] as const) {
    it(`refuses ${setting}=${value}, naming the setting, before touching anything`, async function () {
      const result = await start({ [setting]: value });
      assert.equal(result.code, 2, result.stderr);
      assert.match(
        result.stderr,
        new RegExp(`${setting} must be a whole number of seconds \\(got '${value}'\\)`),
      );
      assert.deepEqual(result.log, []);
    });
  }

  it("reads a leading zero as decimal, not octal", async function () {
    // One refusal, so the deadline is read.
    const result = await start({
      STANDIN_REFUSALS: "1",
      SBINBOX_SQL_WAIT_SECONDS: "08",
      SBINBOX_SQL_RETRY_SECONDS: "00",
    });
    assert.equal(result.code, 0, result.stderr);
  });

  it("names a missing output before touching anything", async function () {
    const result = await start({ WORKER_IDENTITY_CLIENT_ID: "" });
    assert.equal(result.code, 2);
    assert.match(result.stderr, /WORKER_IDENTITY_CLIENT_ID is not set/);
    assert.deepEqual(result.log, []);
  });
});

describe("recognising the firewall's refusal in what mssql and tedious raise", function () {
  it("finds 40615's login error inside mssql's ConnectionError, where tedious dropped the number", function () {
    const login = new tedious.ConnectionError(REFUSAL, "ELOGIN");
    const raised = new mssql.ConnectionError(login);
    assert.ok(sqlServerErrorChain(raised).some(isFirewallRefusal));
  });

  it("tells public access off (47073) from the firewall's refusal, in the same chain", function () {
    const raised = new mssql.ConnectionError(new tedious.ConnectionError(PUBLIC_ACCESS_OFF, "ELOGIN"));
    assert.ok(sqlServerErrorChain(raised).some(isPublicAccessRefusal));
    assert.ok(!sqlServerErrorChain(raised).some(isFirewallRefusal));
    const firewall = new mssql.ConnectionError(new tedious.ConnectionError(REFUSAL, "ELOGIN"));
    assert.ok(!sqlServerErrorChain(firewall).some(isPublicAccessRefusal));
  });

  it("does not take another login failure, or the same text from elsewhere, for it", function () {
    const denied = new mssql.ConnectionError(
      new tedious.ConnectionError("Login failed for user '<token-identified principal>'.", "ELOGIN"),
    );
    assert.ok(!sqlServerErrorChain(denied).some(isFirewallRefusal));
    const socket = new mssql.ConnectionError(new tedious.ConnectionError(REFUSAL, "ESOCKET"));
    assert.ok(!sqlServerErrorChain(socket).some(isFirewallRefusal));
  });
});

/**
 * A TDS endpoint that does what Azure SQL's gateway does for an address its firewall does not admit: it answers the
 * PRELOGIN, then answers LOGIN7 with error 40615 and no LOGINACK. Just enough of TDS 7.4 (MS-TDS 2.2.6.5, 2.2.7.10,
 * 2.2.7.6) for tedious to raise its login error, so the real driver's error reaches `sbinbox migrate`.
 */
function packet(type: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header.writeUInt8(type, 0);
  header.writeUInt8(0x01, 1); // end of message
  header.writeUInt16BE(8 + payload.length, 2);
  header.writeUInt8(1, 6);
  return Buffer.concat([header, payload]);
}

function ucs2(text: string): Buffer {
  return Buffer.from(text, "utf16le");
}

function refusingServer(message: string, number = 40615): Server {
  const prelogin = Buffer.from([
    // VERSION at 11, 6 bytes; ENCRYPTION at 17, 1 byte; terminator.
    0x00,
    0x00,
    0x0b,
    0x00,
    0x06,
    0x01,
    0x00,
    0x11,
    0x00,
    0x01,
    0xff,
    0x0c,
    0x00,
    0x00,
    0x00,
    0x00,
    0x00,
    0x02, // ENCRYPT_NOT_SUP
  ]);
  const server = ucs2("sql-sbinbox-x");
  const body = Buffer.concat([
    Buffer.from([0, 0, 0, 0]), // number, below
    Buffer.from([1, 20]), // state, class
    Buffer.from([message.length & 0xff, message.length >> 8]),
    ucs2(message),
    Buffer.from([server.length / 2]),
    server,
    Buffer.from([0]), // no procedure
    Buffer.from([0, 0, 0, 0]), // line number
  ]);
  body.writeInt32LE(number, 0);
  const error = Buffer.concat([Buffer.from([0xaa, body.length & 0xff, body.length >> 8]), body]);
  const done = Buffer.alloc(13);
  done.writeUInt8(0xfd, 0);
  done.writeUInt16LE(0x0002, 1); // DONE_ERROR
  const loginReply = packet(0x04, Buffer.concat([error, done]));
  return createServer((socket: Socket) => {
    socket.on("error", () => {});
    let buffered = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 8 && buffered.length >= buffered.readUInt16BE(2)) {
        const type = buffered.readUInt8(0);
        buffered = buffered.subarray(buffered.readUInt16BE(2));
        if (type === 0x12) socket.write(packet(0x04, prelogin));
        else if (type === 0x10) socket.end(loginReply);
      }
    });
  });
}

const refusals = [
  {
    what: "refuses the login with Azure SQL's firewall error",
    message: REFUSAL,
    number: 40615,
    title: "exits 75 (the code post-provision retries on), through the real mssql and tedious",
    code: FIREWALL_EXIT_CODE,
    exit: 75,
    says: /firewall refused this machine \(error 40615\)/,
  },
  {
    what: "has public network access off",
    message: PUBLIC_ACCESS_OFF,
    number: 47073,
    title: "exits 77 (not 75: no retry helps) naming the virtual network, through the real mssql and tedious",
    code: PUBLIC_ACCESS_EXIT_CODE,
    exit: 77,
    says: /public network access is off \(error 47073 or 42101\); run this from inside/,
  },
];

for (const refusal of refusals) {
  describe(`sbinbox migrate against a server that ${refusal.what}`, function () {
    this.timeout(60_000);
    let server: Server;
    let port = 0;

    before(async () => {
      server = refusingServer(refusal.message, refusal.number);
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      port = (server.address() as AddressInfo).port;
    });

    after(async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });

    it(refusal.title, async function () {
      const errors: string[] = [];
      const code = await migrate(
        ["--app-user", "id-sbinbox-worker-x", "--app-client-id", CLIENT_ID],
        {
          SBINBOX_SQLSERVER_CONNECTION_STRING: `Server=127.0.0.1,${port};Database=sbinbox;User Id=deployer;Password=unused;Encrypt=false;TrustServerCertificate=true;Connect Timeout=20`,
        },
        () => {},
        (line) => errors.push(line),
      );
      assert.equal(code, refusal.code, errors.join("\n"));
      assert.equal(code, refusal.exit);
      assert.match(errors.join("\n"), refusal.says);
    });
  });
}
