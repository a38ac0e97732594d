/** `sbinbox dev` on a port another program holds: it names the flag that picks another one. */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { runCli } from "../helpers/cli.ts";

describe("sbinbox dev: a port in use", function () {
  this.timeout(60_000);
  let held: Server;
  let data: string;
  before(async () => {
    data = await mkdtemp(join(tmpdir(), "sbinbox-dev-port-"));
    held = createServer().listen(0, "127.0.0.1");
    await once(held, "listening");
  });
  after(async () => {
    held.close();
    await rm(data, { recursive: true, force: true });
  });

  it("the broker's port taken: exit 1 and a hint about --port", async () => {
    const address = held.address();
    assert.ok(address && typeof address === "object");
    const result = await runCli(
      ["dev", "--data", data, "--port", String(address.port), "--postgres-port", "0"],
      {},
    );
    assert.equal(result.code, 1, result.stderr);
    assert.match(result.stderr, /sbinbox dev: cannot start: .*pick another with --port N, or --port 0/);
  });
});
