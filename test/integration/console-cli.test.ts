import assert from "node:assert/strict";
import { request } from "node:http";
import { tmpdir, userInfo } from "node:os";
import { startConsoleServer } from "../../src/console/server.ts";
import { createConsoleService } from "../../src/console/service.ts";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { brokerConfig, useLocalBroker } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";

const QUEUE = "console-cli";

describe("sbinbox console: binding, the warning off loopback, and reads that can be repeated", function () {
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: {} }));

  before(async function () {
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "p-1", subject: "X", body: Buffer.from("{}") },
      { messageId: "p-2", subject: "X", body: Buffer.from('{"n":2}') },
    ]);
    const receiver = fixture.client.createReceiver(QUEUE);
    try {
      for (const m of await receiver.receiveMessages(2, { maxWaitTimeInMs: 2_000 }))
        await receiver.deadLetterMessage(m, {
          deadLetterReason: "Test",
          deadLetterErrorDescription: "for peeking",
        });
    } finally {
      await receiver.close();
    }
  });

  it("peeks the dead-letter queue from its start on every call, on one client (the SDK keeps a cursor)", async function () {
    const first = await peekDeadLetters(fixture.client, QUEUE);
    const second = await peekDeadLetters(fixture.client, QUEUE);
    assert.deepEqual(
      first.map((m) => m.messageId),
      ["p-1", "p-2"],
    );
    assert.deepEqual(
      second.map((m) => m.messageId),
      ["p-1", "p-2"],
    );
    const one = await peekDeadLetters(fixture.client, QUEUE, { max: 1 });
    assert.deepEqual(
      one.map((m) => m.messageId),
      ["p-1"],
    );
  });

  it("shows one message's body by a peek of one from its sequence number, nothing for one that is gone", async function () {
    const [, second] = await peekDeadLetters(fixture.client, QUEUE);
    const service = createConsoleService({ client: fixture.client, entity: QUEUE });
    assert.equal((await service.body(second!.sequenceNumber))?.body, '{"n":2}');
    assert.equal(await service.body(String(Number(second!.sequenceNumber) + 1000)), undefined);
  });

  it("counts active messages apart from scheduled ones (a peek returns both)", async function () {
    const sender = fixture.client.createSender(QUEUE);
    try {
      await sender.sendMessages({ messageId: "now-1", body: "{}" });
      await sender.scheduleMessages({ messageId: "later-1", body: "{}" }, new Date(Date.now() + 3_600_000));
    } finally {
      await sender.close();
    }
    const state = await createConsoleService({ client: fixture.client, entity: QUEUE }).state();
    assert.deepEqual([state.queue.active, state.queue.scheduled], [1, 1]);
  });

  async function startConsole(args: string[]): Promise<{ url: string; stop: () => Promise<string> }> {
    const cli = startCli(["console", "--archive-dir", tmpdir(), ...args], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
    });
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      cli.child.stdout!.on("data", (d: Buffer) => {
        out += String(d);
        const found = /(http:\/\/\S+) /.exec(out)?.[1];
        if (found) resolve(found);
      });
      void cli.done.then((r) => reject(new Error(`console exited ${r.code}: ${r.stderr}`)));
    });
    return {
      url,
      stop: async () => {
        cli.child.kill("SIGINT");
        const result = await cli.done;
        assert.equal(result.code, 0, result.stderr);
        return result.stderr;
      },
    };
  }

  /** GET through the server on 127.0.0.1 with a chosen Host header, no redirect followed. */
  const get = (port: number, path: string, host: string, cookie?: string) =>
    new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
      const req = request(
        {
          host: "127.0.0.1",
          port,
          path,
          headers: { host: `${host}:${port}`, ...(cookie ? { cookie } : {}) },
        },
        (res) => {
          let body = "";
          res.on("data", (d: Buffer) => (body += String(d)));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        },
      );
      req.on("error", reject);
      req.end();
    });

  it("serves on 127.0.0.1 by default, with no warning; nothing, the token least of all, without the one-time sign-in link", async function () {
    const console = await startConsole([]);
    try {
      assert.match(console.url, /^http:\/\/127\.0\.0\.1:\d+\/\?signin=[\w-]{32}$/);
      const url = new URL(console.url);
      const port = Number(url.port);
      const bare = await get(port, "/", "127.0.0.1");
      assert.equal(bare.status, 401, "another local user reaching the port gets nothing");
      assert.doesNotMatch(bare.body, /sbinbox-token/);
      assert.equal((await get(port, "/api/state", "127.0.0.1")).status, 401);
      assert.equal((await get(port, "/?signin=wrong", "127.0.0.1")).status, 401);
      const traded = await get(port, `/?signin=${url.searchParams.get("signin")}`, "127.0.0.1");
      assert.equal(traded.status, 303);
      const setCookie = String(traded.headers["set-cookie"]);
      assert.match(setCookie, /HttpOnly; SameSite=Strict; Path=\//);
      assert.ok(!setCookie.includes(url.searchParams.get("signin")!), "the session is not the link's secret");
      const cookie = setCookie.split(";")[0]!;
      assert.equal(
        (await get(port, `/?signin=${url.searchParams.get("signin")}`, "127.0.0.1")).status,
        401,
        "the link is spent once used",
      );
      const page = await get(port, "/", "127.0.0.1", cookie);
      assert.equal(page.status, 200);
      assert.match(String(page.headers["content-security-policy"]), /default-src 'none'/);
      const token = /name="sbinbox-token" content="([^"]+)"/.exec(page.body)?.[1];
      assert.ok(token);
      const state = (await (
        await fetch(new URL("/api/state", url), { headers: { "x-sbinbox-token": token, cookie } })
      ).json()) as { deadLettered: number; inbox?: unknown; reasons: { name: string }[]; operator: string };
      assert.equal(state.deadLettered, 2);
      // Who is signed in, for the page's "Signed in as": on a connection string, the OS user running the console.
      assert.equal(state.operator, userInfo().username);
      assert.deepEqual(
        state.reasons.map((g) => g.name),
        ["Test"],
      );
      assert.equal(state.inbox, undefined, "no database configured");
      assert.equal(
        (await fetch(new URL("/api/state", url), { headers: { cookie } })).status,
        403,
        "no token, no data",
      );
    } finally {
      assert.doesNotMatch(await console.stop(), /WARNING/);
    }
  });

  it("serves elsewhere only when asked: then the names allowed, the same sign-in, and a warning", async function () {
    const console = await startConsole(["--host", "0.0.0.0", "--allow-host", "ops-box"]);
    let stderr = "";
    try {
      const url = new URL(console.url);
      const secret = url.searchParams.get("signin");
      assert.match(console.url, /^http:\/\/0\.0\.0\.0:\d+\/\?signin=[\w-]{32}$/);
      const port = Number(url.port);
      assert.equal((await get(port, "/", "127.0.0.1")).status, 401, "no link, no page (and no token)");
      assert.equal((await get(port, "/api/state", "ops-box")).status, 401);
      assert.equal((await get(port, `/?signin=${secret}`, "elsewhere")).status, 421, "a name not allowed");
      const traded = await get(port, `/?signin=${secret}`, "ops-box");
      assert.equal(traded.status, 303);
      const cookie = String(traded.headers["set-cookie"]).split(";")[0]!;
      const page = await get(port, "/", "ops-box", cookie);
      assert.equal(page.status, 200);
      assert.match(page.body, /name="sbinbox-token"/);
      assert.equal((await get(port, "/", "0.0.0.0", "sbinbox-session=wrong")).status, 401);
    } finally {
      stderr = await console.stop();
    }
    assert.match(stderr, /WARNING: serving on 0\.0\.0\.0, not loopback, over plain HTTP/);
  });

  it("refuses an --allow-host that is not a host name", async function () {
    const cli = startCli(["console", "--allow-host", "evil/path"], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
    });
    const result = await cli.done;
    assert.equal(result.code, 2);
    assert.match(result.stderr, /--allow-host "evil\/path" is not a host name or address/);
  });

  it("a sign-in link unused for its expiry is refused; sign-out ends the session; the token never goes to a request without one", async function () {
    let clock = 1_000_000;
    const service = createConsoleService({ client: fixture.client, entity: QUEUE });
    const server = await startConsoleServer(service, {
      host: "127.0.0.1",
      port: 0,
      operator: "alice",
      signIn: { linkTtlMs: 10 * 60_000, now: () => clock },
    });
    try {
      const stale = new URL(server.url);
      const port = Number(stale.port);
      clock += 10 * 60_000;
      const expired = await get(port, `/?signin=${stale.searchParams.get("signin")}`, "127.0.0.1");
      assert.equal(expired.status, 401, "expired after 10 minutes unused");
      assert.match(expired.body, /expired unused after 10 min: press Enter/);
      assert.doesNotMatch(expired.body, /sbinbox-token/);
      assert.equal(expired.headers["set-cookie"], undefined);

      const fresh = new URL(server.newSignInLink());
      clock += 10 * 60_000 - 1;
      const traded = await get(port, `/?signin=${fresh.searchParams.get("signin")}`, "127.0.0.1");
      assert.equal(traded.status, 303, "good until its expiry");
      const cookie = String(traded.headers["set-cookie"]).split(";")[0]!;
      const page = await get(port, "/", "127.0.0.1", cookie);
      const token = /name="sbinbox-token" content="([^"]+)"/.exec(page.body)![1]!;
      const post = (path: string, headers: Record<string, string>) =>
        fetch(`http://127.0.0.1:${port}${path}`, {
          method: "POST",
          headers: { origin: `http://127.0.0.1:${port}`, "content-type": "application/json", ...headers },
          body: "{}",
        });
      assert.equal(
        (await post("/api/sign-out", { cookie })).status,
        403,
        "sign-out needs the page's token too",
      );
      const out = await post("/api/sign-out", { cookie, "x-sbinbox-token": token });
      assert.equal(out.status, 200);
      assert.match(String(out.headers.get("set-cookie")), /sbinbox-session=; .*Max-Age=0/);

      const after = await get(port, "/", "127.0.0.1", cookie);
      assert.equal(after.status, 401, "the signed-out session gets no page");
      assert.doesNotMatch(after.body, new RegExp(token), "nor the token");
      const api = await fetch(`http://127.0.0.1:${port}/api/state`, {
        headers: { cookie, "x-sbinbox-token": token },
      });
      assert.equal(api.status, 401, "the old cookie and token together read nothing");
      const replan = await post("/api/plan", { cookie, "x-sbinbox-token": token });
      assert.equal(replan.status, 401, "nor write");
    } finally {
      await server.close();
    }
  });

  it("a session idle for its limit is refused; one in use stays", async function () {
    let clock = 1_000_000;
    const service = createConsoleService({ client: fixture.client, entity: QUEUE });
    const server = await startConsoleServer(service, {
      host: "127.0.0.1",
      port: 0,
      operator: "alice",
      signIn: { sessionIdleMs: 60 * 60_000, now: () => clock },
    });
    try {
      const link = new URL(server.url);
      const port = Number(link.port);
      const traded = await get(port, `/?signin=${link.searchParams.get("signin")}`, "127.0.0.1");
      const cookie = String(traded.headers["set-cookie"]).split(";")[0]!;
      clock += 60 * 60_000 - 1;
      assert.equal((await get(port, "/", "127.0.0.1", cookie)).status, 200, "in use just before its limit");
      clock += 60 * 60_000 - 1;
      assert.equal(
        (await get(port, "/", "127.0.0.1", cookie)).status,
        200,
        "each request starts its idle time anew",
      );
      clock += 60 * 60_000;
      const idle = await get(port, "/", "127.0.0.1", cookie);
      assert.equal(idle.status, 401, "idle for 60 minutes: ended");
      assert.doesNotMatch(idle.body, /sbinbox-token/);
    } finally {
      await server.close();
    }
  });

  it("refuses a --sign-in-expiry or --session-idle of 0", async function () {
    for (const option of ["--sign-in-expiry", "--session-idle"]) {
      const result = await startCli(["console", option, "0s"], {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_QUEUE: QUEUE,
      }).done;
      assert.equal(result.code, 2, option);
      assert.match(result.stderr, new RegExp(`${option} "0s" must be more than 0`));
    }
  });

  it("refuses a --sign-in-expiry that is not an age", async function () {
    const result = await startCli(["console", "--sign-in-expiry", "soon"], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
    }).done;
    assert.equal(result.code, 2);
    assert.match(result.stderr, /--sign-in-expiry "soon" must be a number and a unit/);
  });
});
