import assert from "node:assert/strict";
import { CopyProperty, HandlerRegistry, type IncomingMessage } from "../../src/domain/envelope.ts";
import type { ClaimOutcome, ProcessOutcome } from "../../src/domain/outcome.ts";
import type { SqlExecutor } from "../../src/domain/sql.ts";
import { FakeMailer, welcomeEmailHandler, accountCreditedHandler } from "../../src/example/index.ts";
import type { InboxClaimOutcome, InboxKey, InboxStore, ProcessHint } from "../../src/inbox/store.ts";
import { processMessage } from "../../src/worker/process-message.ts";

/** A pure-logic stand-in for the store port: scripted outcomes, calls recorded. Integration tests use PostgreSQL. */
class ScriptedStore implements InboxStore {
  readonly dialect = "postgres" as const;
  processOutcome: ProcessOutcome = { kind: "committed" };
  claimOutcome: InboxClaimOutcome = { kind: "claimed", claimId: "7" };
  marked: [InboxKey, string | undefined][] = [];
  writes: string[] = [];
  hints: (ProcessHint | undefined)[] = [];
  async process(
    _key: InboxKey,
    work: (tx: SqlExecutor) => Promise<void>,
    hint?: ProcessHint,
  ): Promise<ProcessOutcome> {
    this.hints.push(hint);
    if (this.processOutcome.kind !== "committed") return this.processOutcome;
    try {
      await work({
        dialect: "postgres",
        query: (sql: string) => {
          this.writes.push(sql);
          return Promise.resolve({ rows: [], rowCount: 1 } as never);
        },
      });
    } catch (error) {
      return { kind: "failed", error, errorClass: "permanent" };
    }
    return this.processOutcome;
  }
  claim(): Promise<InboxClaimOutcome> {
    return Promise.resolve(this.claimOutcome);
  }
  markProcessed(key: InboxKey, claimId?: string): Promise<void> {
    this.marked.push([key, claimId]);
    return Promise.resolve();
  }
  migrate = () => Promise.resolve({ applied: [] });
  pendingMigrations = () => Promise.resolve([]);
  isProcessed = () => Promise.resolve(false);
  releaseClaim = () => Promise.resolve(false);
  sweepStaleClaims = () => Promise.resolve(0);
  countOpenClaims = () => Promise.resolve(0);
  cleanup = () => Promise.resolve(0);
  classify = () => "permanent" as const;
  ping = () => Promise.resolve();
  close = () => Promise.resolve();
}

const credit = (extra: Partial<IncomingMessage> = {}): IncomingMessage => ({
  messageId: "m-1",
  subject: "AccountCredited",
  body: Buffer.from('{"accountId":"a","amount":2}'),
  deliveryCount: 0,
  applicationProperties: {},
  ...extra,
});
const welcome: IncomingMessage = {
  messageId: "w-1",
  subject: "WelcomeEmailRequested",
  body: Buffer.from('{"userId":"u1","email":"u1@example.com"}'),
  deliveryCount: 0,
  applicationProperties: {},
};

describe("processMessage: the decision follows the outcome", function () {
  const mailer = new FakeMailer();
  const registry = new HandlerRegistry([accountCreditedHandler(), welcomeEmailHandler(mailer)] as never[]);
  const deps = (store: InboxStore) => ({ store, registry, consumer: "c", maxMessageBytes: 1024 });

  it("tells the store a first delivery only for the broker's first delivery of the message itself", async function () {
    const store = new ScriptedStore();
    const first = async (message: IncomingMessage, attempt?: Parameters<typeof processMessage>[2]) => {
      store.hints.length = 0;
      await processMessage(message, deps(store), attempt);
      assert.equal(store.hints.length, 1);
      return store.hints[0]?.firstDelivery;
    };
    assert.equal(await first(credit()), true);
    assert.equal(await first(credit({ deliveryCount: 1 })), false, "a redelivery");
    const copy = { [CopyProperty.originalKey]: "m-0", [CopyProperty.attempt]: 2 };
    assert.equal(await first(credit({ applicationProperties: copy })), false, "a scheduled retry copy");
    assert.equal(
      await first(credit({ applicationProperties: { [CopyProperty.replay]: 1 } })),
      false,
      "a replayed copy",
    );
    // A retry in place: the same delivery's second attempt, its state already read.
    const again = { attempt: 2, state: { inboxKey: "m-1", attempt: 1, replay: 0 } };
    assert.equal(await first(credit(), again), false, "a retry in place");
  });

  it("committed and duplicate complete; failed abandons with its class", async function () {
    const store = new ScriptedStore();
    assert.deepEqual(await processMessage(credit(), deps(store)), {
      disposition: "complete",
      outcome: "committed",
      messageType: "AccountCredited",
    });
    assert.equal(store.writes.length, 2, "the handler wrote through the transaction handle");
    store.processOutcome = { kind: "duplicate" };
    assert.equal((await processMessage(credit(), deps(store))).outcome, "duplicate");
    const down = new Error("connection refused");
    store.processOutcome = { kind: "failed", error: down, errorClass: "unavailable" };
    const decision = await processMessage(credit(), deps(store));
    assert.equal(decision.disposition, "abandon");
    assert.ok(
      decision.disposition === "abandon" && decision.errorClass === "unavailable" && decision.error === down,
    );
  });

  it("poison dead-letters without touching the store", async function () {
    const store = new ScriptedStore();
    const decision = await processMessage(credit({ body: Buffer.from("nope") }), deps(store));
    assert.equal(decision.disposition, "dead_letter");
    assert.ok(decision.disposition === "dead_letter" && decision.reason === "UndecodableBody");
    assert.equal(store.writes.length, 0);
  });

  it("the demo's failOnce handler fails the first time in a process, then succeeds", async function () {
    const store = new ScriptedStore();
    const once = credit({
      messageId: "f-1",
      body: Buffer.from('{"accountId":"a","amount":2,"failOnce":true}'),
    });
    assert.equal((await processMessage(once, deps(store))).disposition, "abandon");
    assert.equal((await processMessage(once, deps(store))).disposition, "complete");
  });

  it("two-phase: claim, perform with the MessageId as idempotency key, mark processed, complete", async function () {
    const store = new ScriptedStore();
    const decision = await processMessage(welcome, deps(store));
    assert.equal(decision.disposition, "complete");
    assert.deepEqual(store.marked, [[{ messageId: "w-1", consumer: "c" }, "7"]]);
    assert.equal(mailer.sentByKey.get("w-1"), "u1@example.com");
  });

  it("two-phase: duplicate completes, busy and failed abandon, nothing performed", async function () {
    const store = new ScriptedStore();
    const calls = mailer.calls;
    const outcomes: [ClaimOutcome | InboxClaimOutcome, string][] = [
      [{ kind: "duplicate" }, "complete"],
      [{ kind: "busy" }, "abandon"],
      [{ kind: "failed", error: new Error("x"), errorClass: "transient" }, "abandon"],
    ];
    for (const [outcome, disposition] of outcomes) {
      store.claimOutcome = outcome as InboxClaimOutcome;
      assert.equal((await processMessage(welcome, deps(store))).disposition, disposition, outcome.kind);
    }
    assert.equal(mailer.calls, calls);
    assert.equal(store.marked.length, 0);
  });
});
