import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { readArchive } from "../../src/servicebus/dead-letter-archive.ts";
import { peekDeadLetters } from "../../src/servicebus/dead-letter.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { startCli, type CliResult } from "../helpers/cli.ts";
import { launchBrowser } from "../helpers/browser.ts";
import { deadLetterMany } from "../helpers/dead-letters.ts";

const QUEUE = "console-incident";
const N = 10_000;
/** 10,000 dead letters: four reasons spread over the first 9,990, then 10 of the newest reason, past every page. */
const reasonOf = (n: number) =>
  n >= N - 10 ? "Newest" : ["Timeout", "SchemaViolation", "NotRetryable", "Poison"][n % 4]!;
const countOf = (reason: string) =>
  Array.from({ length: N }, (_, n) => reasonOf(n)).filter((r) => r === reason).length;

interface Console {
  readonly link: string;
  readonly child: ReturnType<typeof startCli>["child"];
  readonly done: Promise<CliResult>;
  stderr(): string;
}

// An incident as on-call meets it, in the real browser: a queue of 10,000 dead letters, the newest failures past the
// first page, a selection across pages, two consoles at once, a console killed mid-replay and one stopped by SIGTERM,
// the audit lines and the archive after a purge, and a restore.
describe("sbinbox console in a real browser, in an incident: 10,000 dead letters, two consoles, a console that dies", function () {
  this.timeout(300_000);
  const fixture = useLocalBroker(brokerConfig({ [QUEUE]: { MaxDeliveryCount: 100 } }));
  let archiveDir: string;
  /** The durable audit every console and the restore append to. */
  let auditFile: string;
  const profiles: string[] = [];
  const browsers: BrowserContext[] = [];
  const consoles: Console[] = [];

  function startConsole(): Promise<Console> {
    const cli = startCli(
      ["console", "--archive-dir", archiveDir, "--audit-file", auditFile, "--operator", "alice"],
      {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_QUEUE: QUEUE,
      },
    );
    let err = "";
    cli.child.stderr!.on("data", (d: Buffer) => (err += String(d)));
    return new Promise<Console>((resolve, reject) => {
      let out = "";
      cli.child.stdout!.on("data", (d: Buffer) => {
        out += String(d);
        const found = /(http:\/\/127\.0\.0\.1:\d+\/\?signin=[\w-]+)/.exec(out)?.[1];
        if (found) {
          const c = { link: found, child: cli.child, done: cli.done, stderr: () => err };
          consoles.push(c);
          resolve(c);
        }
      });
      void cli.done.then((r) => reject(new Error(`console exited ${r.code}: ${r.stderr}`)));
    });
  }

  async function openPage(link: string): Promise<Page> {
    const profile = await mkdtemp(join(tmpdir(), "sbinbox-chromium-"));
    profiles.push(profile);
    const browser = await launchBrowser(profile, { viewport: { width: 1400, height: 1000 } });
    browsers.push(browser);
    const page = browser.pages()[0] ?? (await browser.newPage());
    await page.goto(link);
    await page.locator("#dead", { hasText: /\d/ }).waitFor();
    return page;
  }

  /** The page's progress bar value (the count done the page last heard of). */
  const barValue = (page: Page) => page.evaluate<number>("document.getElementById('bar').value");

  before(async function () {
    archiveDir = await mkdtemp(join(tmpdir(), "sbinbox-archive-"));
    auditFile = join(await mkdtemp(join(tmpdir(), "sbinbox-audit-")), "audit.jsonl");
    await deadLetterMany(fixture.client, QUEUE, N, reasonOf);
  });

  after(async function () {
    for (const b of browsers) await b.close().catch(() => undefined);
    for (const p of profiles) await rm(p, { recursive: true, force: true });
    for (const c of consoles) c.child.kill("SIGKILL");
    if (archiveDir) await rm(archiveDir, { recursive: true, force: true });
    if (auditFile) await rm(dirname(auditFile), { recursive: true, force: true });
  });

  it("counts all 10,000 per reason, and shows the newest reason's group, past the first page, on its own", async function () {
    const page = await openPage((await startConsole()).link);
    assert.equal(await page.locator("#dead").textContent(), "10,000");
    const groups = await page.locator("section.group h3").allTextContents();
    assert.ok(groups.includes("Newest (10)"), groups.join());
    assert.ok(groups.includes(`Timeout (${countOf("Timeout").toLocaleString("en")})`), groups.join());
    await page.locator("#matching", { hasText: "10,000 dead letter(s) match." }).waitFor();
    assert.equal(await page.locator("#list tbody tr").count(), 50, "paged: 50 rows, not 10,000");
    await page.getByRole("button", { name: "Show group Newest" }).click();
    await page.locator("#matching", { hasText: "10 dead letter(s) match the filter." }).waitFor();
    const ids = await page.locator("#list tbody tr td:nth-child(2)").allTextContents();
    assert.deepEqual(
      ids,
      Array.from({ length: 10 }, (_, i) => `d-${N - 10 + i}`),
    );
  });

  it("purges a selection across two pages after a confirmation, archives it first, logs it, and restores it", async function () {
    const c = consoles[0]!;
    const spent = await fetch(c.link, { redirect: "manual" });
    assert.equal(spent.status, 401, "the link printed at start is spent: it signed the first browser in");
    const signedIn = browsers[0]!.pages()[0]!;
    await signedIn.getByRole("button", { name: "Clear filter" }).click();
    await signedIn.locator("#matching", { hasText: "10,000 dead letter(s) match." }).waitFor();
    await signedIn.getByRole("checkbox", { name: "Select message d-3", exact: true }).check();
    await signedIn.getByRole("button", { name: "Next page" }).click();
    await signedIn.getByRole("checkbox", { name: "Select message d-60", exact: true }).check();
    await signedIn.locator("#selection", { hasText: "2 selected (on any page)." }).waitFor();
    await signedIn.getByRole("button", { name: "Purge selected" }).click();
    const dialog = signedIn.getByRole("dialog", { name: "Purge messages for good?" });
    await dialog.waitFor();
    assert.match((await dialog.textContent())!, /Delete 2 message\(s\) selected .* archive first/);
    await dialog.getByRole("button", { name: "Purge 2" }).click();
    await signedIn.locator("#progress", { hasText: "Purged 2 of 2 message(s)." }).waitFor();
    assert.equal(fixture.broker.counts(QUEUE).deadLettered, N - 2);

    const [file] = await readdir(archiveDir);
    const archived = readArchive(join(archiveDir, file!));
    assert.deepEqual(
      archived.map((r) => r.messageId),
      ["d-3", "d-60"],
    );
    await waitUntil(() => /"event":"end"/.test(c.stderr()), "the run's end logged");
    const audit = c
      .stderr()
      .split("\n")
      .filter((l) => l.includes('"msg":"console.'))
      .map((l) => (JSON.parse(l) as { audit: Record<string, unknown> }).audit);
    assert.deepEqual(
      audit.map((a) => a.event),
      ["plan", "run", "result", "result", "end"],
    );
    assert.deepEqual(
      audit.filter((a) => a.event === "result").map((a) => [a.messageId, a.result]),
      [
        ["d-3", "purged"],
        ["d-60", "purged"],
      ],
    );
    assert.ok(audit.every((a) => typeof a.operator === "string" && a.operator !== ""));

    const restore = await startCli(
      [
        "dlq",
        "restore",
        "--archive",
        join(archiveDir, file!),
        "--audit-file",
        auditFile,
        "--operator",
        "bob",
      ],
      {
        SBINBOX_SERVICEBUS_CONNECTION_STRING: fixture.broker.connectionString,
        SBINBOX_QUEUE: QUEUE,
      },
    ).done;
    assert.equal(restore.code, 0, restore.stderr);
    assert.match(restore.stdout, /restored 2 message\(s\)/);
    assert.equal(fixture.broker.counts(QUEUE).active, 2, "both back in the queue, as replay copies");

    // The durable audit file: the console's purge by alice, then the restore by bob, a line per message each.
    const lines = (await readFile(auditFile, "utf8"))
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(
      lines.map((l) => [l.component, l.operator, l.action, l.event, l.messageId ?? null, l.result ?? null]),
      [
        ["console", "alice", "purge", "plan", null, null],
        ["console", "alice", "purge", "run", null, null],
        ["console", "alice", "purge", "result", "d-3", "purged"],
        ["console", "alice", "purge", "result", "d-60", "purged"],
        ["console", "alice", "purge", "end", null, null],
        ["dlq", "bob", "restore", "plan", null, null],
        ["dlq", "bob", "restore", "run", null, null],
        ["dlq", "bob", "restore", "result", "d-3", "restored"],
        ["dlq", "bob", "restore", "result", "d-60", "restored"],
        ["dlq", "bob", "restore", "end", null, null],
      ],
    );
    const archivedLine = lines[2]!.archived as { path: string; line: number };
    assert.equal(
      readArchive(archivedLine.path)[archivedLine.line - 1]!.messageId,
      "d-3",
      "the audit points at the archive's line",
    );
  });

  it("two consoles replaying one group at once: every message replayed once, the overlap named on the page", async function () {
    const second = await openPage((await startConsole()).link);
    const first = browsers[0]!.pages()[0]!;
    const group = "Poison";
    const size = (await peekDeadLetters(fixture.client, QUEUE)).filter((m) => m.reason === group).length;
    const activeBefore = fixture.broker.counts(QUEUE).active;
    for (const page of [first, second]) await page.getByRole("button", { name: "Refresh" }).click();
    // The default (lock and abandon): nothing set aside, each walk holding what it passes.
    await first.getByRole("button", { name: `Replay group ${group}` }).click();
    await first
      .getByRole("dialog")
      .getByRole("button", { name: `Replay ${size}` })
      .click();
    await waitUntil(
      () => fixture.broker.counts(QUEUE).active > 2,
      "the first console's run under way",
      30_000,
    );
    await second.getByRole("button", { name: `Replay group ${group}` }).click();
    const dialog = second.getByRole("dialog", { name: "Replay messages?" });
    // The first run takes tens of seconds over about 2,500 messages: the second plans while it is under way.
    await dialog.waitFor();
    await dialog.getByRole("button", { name: /^Replay \d+$/ }).click();
    for (const page of [first, second])
      await page.locator("#progress", { hasText: /^Replayed \d+ of \d+/ }).waitFor({ timeout: 120_000 });
    const left = await peekDeadLetters(fixture.client, QUEUE);
    assert.equal(left.filter((m) => m.reason === group).length, 0, "the whole group replayed");
    assert.equal(
      fixture.broker.counts(QUEUE).active,
      activeBefore + size,
      "one copy each: none replayed twice",
    );
    // Both ran at once, in the default mode: between them each message replayed once, the rest named.
    const said = await Promise.all(
      [first, second].map(async (p) => (await p.locator("#progress").textContent())!),
    );
    const done = said.map((text) => Number(/^Replayed (\d+) of (\d+)/.exec(text)![1]));
    assert.equal(done[0]! + done[1]!, size, said.join(" | "));
    for (const text of said) {
      assert.doesNotMatch(text, /not reached|failed/, text);
      const [, n, total] = /^Replayed (\d+) of (\d+)/.exec(text)!;
      if (Number(n) < Number(total)) assert.match(text, /held by another operator|gone/);
    }
  });

  it("a console killed mid-replay: the page says contact was lost, how far it got and what is left", async function () {
    const page = browsers[0]!.pages()[0]!;
    const c = consoles[0]!;
    await page.getByRole("button", { name: "Refresh" }).click();
    const group = "Timeout";
    const size = (await peekDeadLetters(fixture.client, QUEUE)).filter((m) => m.reason === group).length;
    const activeBefore = fixture.broker.counts(QUEUE).active;
    await page.getByRole("button", { name: `Replay group ${group}` }).click();
    await page
      .getByRole("dialog")
      .getByRole("button", { name: /^Replay \d+$/ })
      .click();
    await waitUntil(
      () => fixture.broker.counts(QUEUE).active > activeBefore + 20,
      "the replay under way",
      30_000,
    );
    c.child.kill("SIGKILL");
    await c.done;
    const lost = page.locator("#lost");
    await lost.waitFor({ state: "visible", timeout: 15_000 });
    assert.match(
      (await lost.textContent())!,
      /Lost contact with the console .*: \d+ of \d+ done when the console last answered\. \d+ not confirmed/,
    );
    const shown = await barValue(page);
    const left = (await peekDeadLetters(fixture.client, QUEUE)).filter((m) => m.reason === group).length;
    assert.ok(left > 0, "the rest is still dead-lettered");
    assert.ok(size - left >= shown, `the page said ${shown} done; ${size - left} were`);
  });

  it("SIGTERM mid-purge: the message in hand is finished, a summary is printed, what was purged is archived", async function () {
    const c = await startConsole();
    const page = await openPage(c.link);
    const group = "SchemaViolation";
    const before = fixture.broker.counts(QUEUE).deadLettered;
    await page.getByRole("button", { name: `Purge group ${group}` }).click();
    await page
      .getByRole("dialog")
      .getByRole("button", { name: /^Purge \d+$/ })
      .click();
    await waitUntil(
      () => fixture.broker.counts(QUEUE).deadLettered < before - 20,
      "the purge under way",
      30_000,
    );
    c.child.kill("SIGTERM");
    const result = await c.done;
    assert.equal(result.code, 1, "something was left");
    const summary = /purge stopped: (\d+) of (\d+) done \((\d+) purged, (\d+) not reached\)/.exec(
      result.stderr,
    );
    assert.ok(summary, result.stderr.slice(-2000));
    const purged = Number(summary[1]);
    assert.equal(
      fixture.broker.counts(QUEUE).deadLettered,
      before - purged,
      "exactly the purged ones are gone",
    );
    const files = await readdir(archiveDir);
    const archivedOfGroup = files
      .flatMap((f) => readArchive(join(archiveDir, f)))
      .filter((r) => r.reason === group);
    assert.equal(archivedOfGroup.length, purged, "each purged message archived, and no other");
  });
});
