import assert from "node:assert/strict";
import fc from "fast-check";
import type { ServiceBusMessage } from "@azure/service-bus";
import type { Database } from "../../src/app/database.ts";
import { accountCreditedHandler, accountCreditedSchema, ACCOUNT_CREDITED } from "../../src/example/index.ts";
import type { Worker } from "../../src/worker/worker.ts";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import { creditsPerMessage, exampleDatabase, startTestWorker } from "../helpers/worker.ts";

const QUEUE = "fuzz";
const MAX_BYTES = 4096;
const POISON_REASONS = ["UndecodableBody", "UnknownMessageType", "SchemaViolation", "MessageTooLarge"];

/** One generated message: what is sent, and what the documented rules say must become of it. */
interface Case {
  readonly messageId: string;
  readonly body: unknown;
  /** "data": bytes as sent (what sbinbox's publisher and .NET send); "value": an AMQP value section. */
  readonly section: "data" | "value";
  readonly subject?: string;
  readonly contentType?: string;
  readonly properties: Record<string, string | number | boolean>;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The README's rules, stated independently of the worker's code: a message is applied iff its body is at most
 * the size limit, its content type is absent or application/json, it is UTF-8 JSON (or an AMQP value), its type
 * (subject, else the "type" property) has a handler, and it satisfies that type's schema.
 */
function shouldApply(c: Case): boolean {
  let value: unknown;
  let size: number;
  if (c.section === "value" && typeof c.body === "string") {
    // A string value is JSON text, as a string body would be.
    size = Buffer.byteLength(c.body, "utf8");
    try {
      value = JSON.parse(c.body);
    } catch {
      return false;
    }
  } else if (c.section === "value") {
    value = c.body;
    size = Buffer.byteLength(JSON.stringify(c.body) ?? "", "utf8");
  } else {
    const bytes = c.body as Uint8Array;
    size = bytes.byteLength;
    try {
      value = JSON.parse(utf8.decode(bytes));
    } catch {
      return false;
    }
  }
  if (size > MAX_BYTES) return false;
  const mediaType = c.contentType?.split(";")[0]?.trim().toLowerCase();
  if (mediaType && mediaType !== "application/json") return false;
  const property = c.properties.type;
  const type = c.subject?.trim() || (typeof property === "string" ? property.trim() : "");
  if (type !== ACCOUNT_CREDITED) return false;
  return accountCreditedSchema.safeParse(value).success;
}

// PostgreSQL text cannot hold U+0000: such ids and fields are a separate, documented case (see the last test).
const text = (max: number) =>
  fc.string({ unit: "binary", maxLength: max }).map((s) => s.replaceAll("\0", ""));
const validBody = fc.record(
  {
    accountId: text(100).filter((s) => s.length > 0),
    amount: fc.integer({ min: 1, max: 1_000_000_000 }),
    reference: text(200),
  },
  { requiredKeys: ["accountId", "amount"] },
);
const anyBytes = fc.oneof(
  fc.uint8Array({ maxLength: 6000 }),
  fc.string({ unit: "binary", maxLength: 300 }).map((s) => new Uint8Array(Buffer.from(s))),
  fc.jsonValue({ maxDepth: 3 }).map((v) => new Uint8Array(Buffer.from(JSON.stringify(v)))),
  validBody.map((v) => new Uint8Array(Buffer.from(JSON.stringify(v)))),
  fc
    .integer({ min: 4000, max: 9000 })
    .map((n) => Buffer.from(JSON.stringify({ accountId: "big", amount: 1, reference: "x".repeat(n) }))),
);
/**
 * JSON-like values for AMQP value sections. No doubles: rhea, on the sending side, encodes an integral double
 * beyond 32 bits as a long and throws (a limit of the sender, not of the worker).
 */
const amqpValue = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.string({ maxLength: 40 }),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.string({ maxLength: 10 }), tie("value"), { maxKeys: 4 }),
  ),
})).value;
const contentType = fc.option(
  fc.oneof(
    fc.constantFrom(
      "application/json",
      "application/json; charset=utf-8",
      " Application/JSON ",
      "",
      "text/plain",
    ),
    fc.string({ maxLength: 40 }),
  ),
  { nil: undefined },
);
const subject = fc.option(
  fc.oneof(
    fc.constantFrom(ACCOUNT_CREDITED, ` ${ACCOUNT_CREDITED} `, "AccountDebited", ""),
    fc.string({ maxLength: 30 }),
  ),
  { nil: undefined },
);
const properties = fc
  .tuple(
    fc.dictionary(
      fc.string({ minLength: 1, maxLength: 12 }),
      fc.oneof(fc.string({ maxLength: 30 }), fc.integer(), fc.boolean()),
      { maxKeys: 4 },
    ),
    fc.option(fc.constantFrom(ACCOUNT_CREDITED, "Other", ""), { nil: undefined }),
  )
  .map(([props, type]) => (type === undefined ? props : { ...props, type }));

let serial = 0;
const messageId = fc
  .string({ unit: "grapheme", maxLength: 60 })
  .map((s) => `${++serial}-${s.replaceAll("\0", "")}`);

const validCase: fc.Arbitrary<Case> = fc
  .record({
    messageId,
    body: validBody,
    section: fc.constantFrom<"data" | "value">("data", "value"),
    byProperty: fc.boolean(),
    contentType: fc.constantFrom(undefined, "application/json", "application/json; charset=utf-8"),
    properties,
  })
  .map(({ body, section, byProperty, properties: props, ...rest }) => ({
    ...rest,
    section,
    body: section === "data" ? new Uint8Array(Buffer.from(JSON.stringify(body))) : body,
    subject: byProperty ? undefined : ACCOUNT_CREDITED,
    properties: byProperty ? { ...props, type: ACCOUNT_CREDITED } : props,
  }));
const anyCase: fc.Arbitrary<Case> = fc.oneof(
  fc.record({
    messageId,
    body: anyBytes,
    section: fc.constant("data" as const),
    subject,
    contentType,
    properties,
  }),
  fc.record({
    messageId,
    body: fc.oneof(amqpValue, validBody),
    section: fc.constant("value" as const),
    subject,
    contentType,
    properties,
  }),
);

/** The SDK's message, or its raw AMQP form (an AmqpAnnotatedMessage, which sendMessages also takes) for a value section. */
function toMessage(c: Case): ServiceBusMessage {
  if (c.section === "value") {
    const annotated = {
      body: c.body,
      bodyType: "value",
      properties: { messageId: c.messageId, subject: c.subject, contentType: c.contentType },
      applicationProperties: c.properties,
    };
    return annotated;
  }
  return {
    messageId: c.messageId,
    body: Buffer.from(c.body as Uint8Array),
    subject: c.subject,
    contentType: c.contentType,
    applicationProperties: c.properties,
  };
}

describe("fuzz: arbitrary messages through the real SDK, local broker and PostgreSQL", function () {
  this.timeout(120_000);
  const fixture = useLocalBroker(
    brokerConfig({
      [QUEUE]: { LockDuration: "PT5S", MaxDeliveryCount: 3, RequiresDuplicateDetection: false },
    }),
  );
  let db: Database;
  let worker: Worker;

  before(async () => {
    db = await exampleDatabase("fuzz_worker");
    worker = startTestWorker({
      client: fixture.client,
      db,
      queue: QUEUE,
      handlers: [accountCreditedHandler()],
      maxMessageBytes: MAX_BYTES,
    });
  });
  after(async () => {
    await worker.stop();
    await db.close();
  });

  const counts = () => fixture.broker.counts(QUEUE);

  /** Empties the dead-letter queue, returning each message's id and reason. */
  async function takeDeadLetters(): Promise<Map<string, string | undefined>> {
    const dlq = fixture.client.createReceiver(QUEUE, {
      subQueueType: "deadLetter",
      receiveMode: "receiveAndDelete",
    });
    const taken = new Map<string, string | undefined>();
    try {
      while (counts().deadLettered > 0) {
        for (const m of await dlq.receiveMessages(50, { maxWaitTimeInMs: 500 }))
          taken.set(String(m.messageId), m.deadLetterReason);
      }
    } finally {
      await dlq.close();
    }
    return taken;
  }

  /** Sends the cases, waits until the queue holds nothing active or locked, and checks each outcome. */
  async function check(cases: Case[]): Promise<void> {
    const sender = fixture.client.createSender(QUEUE);
    try {
      await sender.sendMessages(cases.map(toMessage));
    } finally {
      await sender.close();
    }
    await waitUntil(
      () => {
        const c = counts();
        return c.active + c.locked + c.scheduled === 0;
      },
      "every message is settled for good (nothing active or locked)",
      30_000,
    );
    const dead = await takeDeadLetters();
    const credits = await creditsPerMessage(db);
    for (const c of cases) {
      const label = `${JSON.stringify(c.messageId)} ${c.section} subject=${JSON.stringify(c.subject)} ct=${JSON.stringify(c.contentType)}`;
      const rows = credits.get(c.messageId) ?? 0;
      if (shouldApply(c)) {
        assert.equal(rows, 1, `valid message applied exactly once: ${label}`);
        assert.ok(!dead.has(c.messageId), `valid message not dead-lettered: ${label}`);
      } else {
        assert.equal(rows, 0, `no business row for an invalid message: ${label}`);
        assert.ok(dead.has(c.messageId), `invalid message dead-lettered: ${label}`);
        const reason = dead.get(c.messageId);
        assert.ok(
          reason && POISON_REASONS.includes(reason),
          `dead-lettered at once with a reason (${reason}): ${label}`,
        );
      }
    }
    assert.equal(worker.paused, false, "the worker never paused");
    assert.equal((await worker.readiness()).ready, true, "the worker is still receiving");
  }

  it("valid messages, in any encoding the rules allow, are applied exactly once", async function () {
    await fc.assert(fc.asyncProperty(fc.array(validCase, { minLength: 1, maxLength: 5 }), check), {
      numRuns: 15,
    });
  });

  it("arbitrary bodies, content types, subjects and properties: settled, and no row unless valid", async function () {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(anyCase, validCase), { minLength: 1, maxLength: 6 }), check),
      { numRuns: 30 },
    );
    assert.equal(worker.stats.settlementFailures, 0, "no settlement failed");
  });

  it("U+0000, which PostgreSQL text cannot hold, in a field or the MessageId: dead-lettered as RetriesExhausted after its one retry, no row", async function () {
    const body = (accountId: string) => new Uint8Array(Buffer.from(JSON.stringify({ accountId, amount: 3 })));
    const cases: Case[] = [
      {
        messageId: `${++serial}-nul-field`,
        body: body("a\u0000b"),
        section: "data",
        subject: ACCOUNT_CREDITED,
        properties: {},
      },
      {
        messageId: `${++serial}-nul\u0000id`,
        body: body("acc"),
        section: "data",
        subject: ACCOUNT_CREDITED,
        properties: {},
      },
    ];
    const sender = fixture.client.createSender(QUEUE);
    await sender.sendMessages(cases.map(toMessage));
    await sender.close();
    await waitUntil(
      () => counts().active + counts().locked === 0 && counts().deadLettered === 2,
      "both dead-lettered",
      30_000,
    );
    const dead = await takeDeadLetters();
    const credits = await creditsPerMessage(db);
    for (const c of cases) {
      // The schema accepts the string; the database refuses it on every attempt (a permanent error), so the
      // worker retries it once, as the permanent schedule says, and dead-letters it.
      assert.equal(dead.get(c.messageId), "RetriesExhausted", c.messageId);
      assert.equal(credits.get(c.messageId), undefined, c.messageId);
    }
    assert.equal(worker.paused, false, "a refused value is not an outage");
  });
});
