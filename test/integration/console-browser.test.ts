import assert from "node:assert/strict";
import { request } from "node:http";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { BrowserContext, Page } from "playwright-core";
import { z } from "zod";
import type { Database } from "../../src/app/database.ts";
import { DoNotRetryError } from "../../src/domain/errors.ts";
import type { MessageHandler } from "../../src/domain/handler.ts";
import { accountSql } from "../../src/example/index.ts";
import { openOutboxStore } from "../../src/outbox/open.ts";
import { sendRawMessages } from "../../src/servicebus/raw.ts";
import { launchBrowser } from "../helpers/browser.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { startCli } from "../helpers/cli.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "console";
/** Screenshots of each state, for a person to look at (gitignored). */
const OUTPUT = fileURLToPath(new URL("../../test-output/console/", import.meta.url));

describe("sbinbox console in a real browser: dead-letters by reason, a replay applied once, a purge that asks", function () {
  this.timeout(120_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: "PT10M" },
    }),
  );
  let db: Database & { url: string };
  let broken = true;
  const credit: MessageHandler = {
    kind: "transactional",
    type: "Credit",
    schema: z.object({ amount: z.number() }),
    async handle(body, tx, context) {
      if (broken) throw new DoNotRetryError("the ledger rejects this account (fixed before the replay)");
      await tx.query(accountSql.insertCredit[tx.dialect], [
        context.messageId,
        "acct",
        (body as { amount: number }).amount,
      ]);
    },
  };
  let console: ReturnType<typeof startCli>;
  let url: string;
  let profile: string;
  let archiveDir: string;
  let browser: BrowserContext;
  let page: Page;

  async function settle(count: number): Promise<void> {
    const worker = startTestWorker({ client: fixture.client, db, queue: QUEUE, handlers: [credit] });
    try {
      await waitUntil(() => worker.stats.settled === count, `${count} message(s) settled`, 20_000);
    } finally {
      await worker.stop();
    }
  }
  const shot = (name: string) => page.screenshot({ path: join(OUTPUT, `${name}.png`), fullPage: true });

  before(async function () {
    db = await exampleDatabase("console_browser");
    const outbox = await openOutboxStore({ kind: "postgres", url: db.url });
    await outbox.migrate();
    await outbox.close();
    const body = (value: unknown) => Buffer.from(JSON.stringify(value));
    await sendRawMessages(fixture.client, QUEUE, [
      { messageId: "credit-a", subject: "Credit", body: body({ amount: 5 }) },
      { messageId: "credit-b", subject: "Credit", body: body({ amount: 7 }) },
      { messageId: "mystery-1", subject: "Mystery", body: body({}) },
      { messageId: "bad-amount", subject: "Credit", body: body({ amount: "lots" }) },
    ]);
    await settle(4);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 4);

    await mkdir(OUTPUT, { recursive: true });
    archiveDir = await mkdtemp(join(tmpdir(), "sbinbox-archive-"));
    console = startCli(["console", "--archive-dir", archiveDir], {
      SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
      SBINBOX_QUEUE: QUEUE,
      SBINBOX_DATABASE: "postgres",
      SBINBOX_POSTGRES_URL: db.url,
    });
    url = await new Promise<string>((resolve, reject) => {
      let out = "";
      console.child.stdout!.on("data", (d: Buffer) => {
        out += String(d);
        const found = /(http:\/\/127\.0\.0\.1:\d+\/\?signin=[\w-]+)/.exec(out)?.[1];
        if (found) resolve(found);
      });
      void console.done.then((r) => reject(new Error(`console exited ${r.code}: ${r.stderr}`)));
    });
    profile = await mkdtemp(join(tmpdir(), "sbinbox-chromium-"));
    browser = await launchBrowser(profile, { viewport: { width: 1200, height: 900 } });
    page = browser.pages()[0] ?? (await browser.newPage());
  });

  after(async function () {
    await browser?.close();
    if (profile) await rm(profile, { recursive: true, force: true });
    if (archiveDir) await rm(archiveDir, { recursive: true, force: true });
    console?.child.kill("SIGINT");
    const result = await console?.done;
    assert.equal(result?.code, 0, result?.stderr);
    await db?.close();
  });

  it("refuses the page without the one-time sign-in link, then lists the dead-letter queue grouped by three reasons, with counts, the database's state, and bodies on request", async function () {
    const bare = await page.goto(new URL("/", url).href);
    assert.equal(bare?.status(), 401);
    assert.doesNotMatch(await page.content(), /sbinbox-token/);
    await page.goto(url);
    const groups = page.locator("section.group h3");
    await groups.first().waitFor();
    assert.deepEqual((await groups.allTextContents()).sort(), [
      "NotRetryable (2)",
      "SchemaViolation (1)",
      "UnknownMessageType (1)",
    ]);
    assert.equal(await page.locator("#dead").textContent(), "4");
    assert.equal(await page.locator("#active").textContent(), "0");
    assert.equal(await page.locator("#open-claims").textContent(), "0");
    assert.equal(await page.locator("#outbox-stale").textContent(), "0");
    assert.equal(await page.locator("pre").count(), 0, "no body until asked for");
    await page.getByRole("button", { name: "Show body of credit-a" }).click();
    await page.locator("pre", { hasText: '{"amount":5}' }).waitFor();
    await shot("01-listed");
  });

  it("has labelled controls, real buttons, and a focus order that follows the page", async function () {
    for (const id of ["credit-a", "credit-b", "mystery-1", "bad-amount"])
      assert.equal(await page.getByRole("checkbox", { name: `Select message ${id}` }).count(), 1, id);
    assert.equal(await page.locator("[onclick], div[role=button]").count(), 0, "no clickable divs");
    const firstReason = (await page.locator("section.group h3").first().textContent())!.replace(
      / \(\d+\)$/,
      "",
    );
    await page.locator("body").click({ position: { x: 1, y: 1 } });
    const order: string[] = [];
    for (let i = 0; i < 6; i++) {
      await page.keyboard.press("Tab");
      order.push(
        // A string: the test's TypeScript has no DOM types; this runs in the page.
        await page.evaluate<string>(
          `(() => { const e = document.activeElement; return e.getAttribute("aria-label") ?? e.textContent; })()`,
        ),
      );
    }
    assert.deepEqual(order.slice(0, 5), [
      "Sign out",
      "Refresh",
      `Show group ${firstReason}`,
      `Replay group ${firstReason}`,
      `Purge group ${firstReason}`,
    ]);
    assert.match(order[5]!, /^Show group /);
    assert.equal(await page.locator("#progress").getAttribute("aria-live"), "polite");
  });

  it("replays one group after a confirmation, and the database shows each effect exactly once", async function () {
    broken = false;
    await page.getByRole("button", { name: "Replay group NotRetryable" }).click();
    const dialog = page.getByRole("dialog", { name: "Replay messages?" });
    await dialog.waitFor();
    assert.match((await dialog.textContent())!, /Send 2 message\(s\) of reason NotRetryable/);
    assert.equal(
      await page.evaluate<string>("document.activeElement.textContent"),
      "Cancel",
      "focus on the safe choice",
    );
    await shot("02-confirm-replay");
    await dialog.getByRole("button", { name: "Replay 2" }).click();
    await page.locator("#progress", { hasText: "Replayed 2 of 2 message(s)." }).waitFor();
    // The replayed group's buttons are gone: focus goes to the result, not to <body>.
    await page.locator("#progress:focus").waitFor();
    const results = await page.locator("#results tbody tr").allTextContents();
    assert.equal(results.length, 2);
    for (const row of results) assert.match(row, /^credit-[ab]replayedcopy \S+/);
    await shot("03-replayed");
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 2);

    await settle(2);
    const credits = await creditsPerMessage(db);
    assert.equal(credits.get("credit-a"), 1);
    assert.equal(credits.get("credit-b"), 1);
    assert.equal(credits.size, 2, "nothing else applied");
    await page.getByRole("button", { name: "Refresh" }).click();
    await page.locator("#dead", { hasText: "2" }).waitFor();
  });

  it("asks before a purge, changes nothing when cancelled, and deletes only the group when confirmed", async function () {
    await page.getByRole("button", { name: "Purge group UnknownMessageType" }).click();
    const dialog = page.getByRole("dialog", { name: "Purge messages for good?" });
    await dialog.waitFor();
    assert.match((await dialog.textContent())!, /Delete 1 message\(s\) of reason UnknownMessageType/);
    await shot("04-confirm-purge");
    await dialog.getByRole("button", { name: "Cancel" }).click();
    await page.locator("#progress", { hasText: "Cancelled: nothing was changed." }).waitFor();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 2, "cancelled: nothing purged");

    await page.getByRole("button", { name: "Purge group UnknownMessageType" }).click();
    await dialog.getByRole("button", { name: "Purge 1" }).click();
    await page.locator("#progress", { hasText: "Purged 1 of 1 message(s)." }).waitFor();
    assert.match((await page.locator("#results tbody tr").allTextContents()).join(), /^mystery-1purged/);
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 1);
    // The list is rebuilt after the run: the purged group leaving it is the event to wait on (the other group was
    // shown before the purge too, so waiting for it alone could read the list before its refresh).
    await page.locator("section.group h3", { hasText: "UnknownMessageType" }).waitFor({ state: "detached" });
    await page.locator("section.group h3", { hasText: "SchemaViolation (1)" }).waitFor();
    assert.equal(await page.locator("section.group").count(), 1);
    await shot("05-purged");
  });

  it("edit-and-retry checks the edited body against the handler module before anything is sent", async function () {
    await page.getByRole("button", { name: "Show body of bad-amount" }).click();
    await page.getByRole("button", { name: "Edit and retry bad-amount" }).click();
    const area = page.getByRole("textbox", { name: "Edited body of bad-amount" });
    assert.equal(await area.inputValue(), '{"amount":"lots"}');
    await area.fill('{"amount":3}');
    await page.getByRole("button", { name: "Check and retry bad-amount" }).click();
    // The console loads SBINBOX_HANDLERS (here unset: the built-in example), which has no Credit handler.
    await page.locator("#progress", { hasText: 'no handler for the message type "Credit"' }).waitFor();
    assert.equal(await page.getByRole("dialog").count(), 0, "no confirmation: nothing to send");
    await area.fill("{not json");
    await page.getByRole("button", { name: "Check and retry bad-amount" }).click();
    await page.locator("#progress", { hasText: "the edited body is not JSON" }).waitFor();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 1, "still dead-lettered");
  });

  it("refuses writes the page did not confirm: no token, a cross-origin write, a reused token, another Host", async function () {
    const token = (await page.locator('meta[name="sbinbox-token"]').getAttribute("content"))!;
    const origin = new URL(url).origin;
    const session = (await browser.cookies()).find((c) => c.name === "sbinbox-session")!;
    const cookie = `${session.name}=${session.value}`;
    const post = (path: string, body: unknown, headers: Record<string, string>) =>
      fetch(new URL(path, url), {
        method: "POST",
        headers: { "content-type": "application/json", cookie, ...headers },
        body: JSON.stringify(body),
      });
    const plan = { action: "purge", filter: { reason: "SchemaViolation" } };
    assert.equal((await post("/api/plan", plan, { origin })).status, 403, "no token");
    assert.equal(
      (await post("/api/plan", plan, { origin: "http://evil.example", "x-sbinbox-token": token })).status,
      403,
      "another origin",
    );
    const planned = await post("/api/plan", plan, { origin, "x-sbinbox-token": token });
    assert.equal(planned.status, 200);
    const { token: confirm } = (await planned.json()) as { token: string };
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, 1, "a plan changes nothing");
    assert.equal(
      (await post("/api/run", { token: "made-up" }, { origin, "x-sbinbox-token": token })).status,
      409,
    );
    assert.equal(
      (await post("/api/run", { token: confirm }, { origin, "x-sbinbox-token": token })).status,
      202,
    );
    await waitUntil(() => fixture.broker.counts(QUEUE).deadLettered === 0, "the confirmed purge ran");
    assert.equal(
      (await post("/api/run", { token: confirm }, { origin, "x-sbinbox-token": token })).status,
      409,
      "a confirmation is used once",
    );
    const status = await new Promise<number>((resolve, reject) => {
      const target = new URL(url);
      request(
        {
          host: target.hostname,
          port: target.port,
          path: "/",
          headers: { host: `rebound.example:${target.port}` },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      )
        .on("error", reject)
        .end();
    });
    assert.equal(status, 421, "a DNS-rebound Host is refused");
  });

  it("Sign out ends the session: the page is gone, and a reload is refused without a new link", async function () {
    await page.goto(new URL("/", url).href);
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByText("Signed out. Open a new sign-in link from the console to come back.").waitFor();
    const reload = await page.reload();
    assert.equal(reload?.status(), 401, "the session is over on the console, not only on the page");
    assert.doesNotMatch(await page.content(), /sbinbox-token/, "and no token is served");
    assert.equal(
      (await page.context().cookies()).filter((c) => c.name === "sbinbox-session").length,
      0,
      "the cookie cleared",
    );
  });
});
