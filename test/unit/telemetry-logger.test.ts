import assert from "node:assert/strict";
import { context, INVALID_SPAN_CONTEXT, ROOT_CONTEXT, trace } from "@opentelemetry/api";
import { decodeMessage, HandlerRegistry } from "../../src/domain/envelope.ts";
import { PoisonMessageError } from "../../src/domain/errors.ts";
import { exampleHandlers } from "../../src/example/index.ts";
import { createLogger } from "../../src/telemetry/logger.ts";
import { useTelemetryCapture } from "../helpers/telemetry.ts";

function capturingLogger(level?: "debug" | "info" | "warn" | "error") {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({
    ...(level ? { level } : {}),
    write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
    fields: { component: "worker" },
  });
  return { logger, lines };
}

describe("telemetry: the structured logger", () => {
  const telemetry = useTelemetryCapture();

  it("writes one JSON object per line with the active span's trace and span ids", () => {
    const { logger, lines } = capturingLogger();
    trace.getTracer("test").startActiveSpan("process orders", (active) => {
      logger.info("settled", { messageId: "m-1" });
      active.end();
    });
    const [line] = lines;
    const active = telemetry().spansNamed("process orders")[0];
    assert.ok(line && active);
    assert.equal(line.trace_id, active.spanContext().traceId);
    assert.equal(line.span_id, active.spanContext().spanId);
    assert.equal(line.msg, "settled");
    assert.equal(line.level, "info");
    assert.equal(line.messageId, "m-1");
    assert.equal(line.component, "worker");
    assert.match(String(line.time), /^\d{4}-\d\d-\d\dT/);
  });

  it("carries no ids outside a span", () => {
    const { logger, lines } = capturingLogger();
    logger.warn("idle");
    assert.equal(lines.length, 1);
    assert.equal("trace_id" in lines[0]!, false);
    assert.equal("span_id" in lines[0]!, false);
  });

  it("carries no ids under a span that carries no trace (all-zero ids would join unrelated lines)", () => {
    const { logger, lines } = capturingLogger();
    context.with(trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(INVALID_SPAN_CONTEXT)), () =>
      logger.info("untraced"),
    );
    assert.equal(lines.length, 1);
    assert.equal("trace_id" in lines[0]!, false);
    assert.equal("span_id" in lines[0]!, false);
  });

  it("drops lines below its level, and children keep the parent's fields", () => {
    const { logger, lines } = capturingLogger("warn");
    logger.info("not written");
    logger
      .child({ queue: "orders" })
      .error("written", { error: Object.assign(new Error("boom"), { code: "57P01" }) });
    assert.equal(lines.length, 1);
    assert.deepEqual(
      { component: lines[0]!.component, queue: lines[0]!.queue, error: lines[0]!.error },
      { component: "worker", queue: "orders", error: { name: "Error", message: "boom", code: "57P01" } },
    );
  });

  it("a poison message's description, which is logged, names the problem without quoting the body", () => {
    const registry = new HandlerRegistry(exampleHandlers());
    const bodies = [
      "Alice Smith, 12 Elm Street",
      '{"accountId":"Alice Smith","amount":-1}',
      '{"accountId": Alice}',
    ];
    for (const body of bodies) {
      let description = "";
      try {
        decodeMessage(
          {
            messageId: "m-1",
            body: Buffer.from(body),
            subject: "AccountCredited",
            contentType: "application/json",
            deliveryCount: 0,
            applicationProperties: {},
          },
          registry,
          1024,
        );
      } catch (error) {
        assert.ok(error instanceof PoisonMessageError);
        description = error.message;
      }
      assert.notEqual(description, "", body);
      assert.doesNotMatch(description, /Alice|Elm/, description);
    }
  });
});

describe("telemetry: the logger keeps bodies and secrets out", () => {
  it("redacts body and secret fields at the top level and one level down", () => {
    const { logger, lines } = capturingLogger();
    logger.warn("oops", {
      body: "Alice Smith",
      message: { body: '{"accountId":"Alice"}', messageId: "m-1" },
      connectionString: "Endpoint=sb://x/;SharedAccessKey=abc",
      config: { password: "hunter2" },
    });
    const text = JSON.stringify(lines[0]);
    assert.doesNotMatch(text, /Alice|hunter2|abc/);
    assert.equal(lines[0]!.body, "[redacted]");
    assert.deepEqual(lines[0]!.message, { body: "[redacted]", messageId: "m-1" });
  });

  it("masks a secret quoted inside an error message or any other text", () => {
    const { logger, lines } = capturingLogger();
    logger.error("connect failed", {
      error: new Error("bad Endpoint=sb://h/;SharedAccessKeyName=k;SharedAccessKey=s3cr3t= here"),
      url: "postgres://app:pa55word@db:5432/inbox",
    });
    const text = JSON.stringify(lines[0]);
    assert.doesNotMatch(text, /s3cr3t|pa55word/);
    assert.match(text, /SharedAccessKeyName=k/);
    assert.match(text, /postgres:\/\/app:\[redacted\]@db:5432/);
  });
});

describe("telemetry: the local broker's public connection string stays readable", () => {
  it("keeps a development emulator's key, which is public", () => {
    const { logger, lines } = capturingLogger();
    const local =
      "Endpoint=sb://localhost:5672;SharedAccessKeyName=Root;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true";
    logger.info("embedded defaults", { localBrokerConnectionString: local });
    assert.equal(lines[0]!.localBrokerConnectionString, local);
  });
});

describe("telemetry: masking stays inside one JSON field", () => {
  it("keeps the embedded defaults' two fields apart, the PostgreSQL URL's password masked in its own", () => {
    const { logger, lines } = capturingLogger();
    // The line the worker logs on embedded defaults (src/app/app.ts), with the values of a real run.
    const local =
      "Endpoint=sb://localhost:31467;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true";
    logger.info("embedded defaults: local broker and embedded PostgreSQL started", {
      localBrokerConnectionString: local,
      postgres: "postgres://postgres:postgres@127.0.0.1:31471/postgres",
    });
    assert.equal(lines[0]!.localBrokerConnectionString, local);
    assert.equal(lines[0]!.postgres, "postgres://postgres:[redacted]@127.0.0.1:31471/postgres");
  });
});

describe("telemetry: masking happens before serialisation (quoted, braced and URL forms)", () => {
  const cases: { fields: Record<string, unknown>; secret: RegExp; kept: RegExp }[] = [
    {
      fields: { error: { message: 'failed for postgres://app:s3cr"etTail@db:5432/x' } },
      secret: /s3cr|etTail/,
      kept: /postgres:\/\/app:\[redacted\]@db:5432\/x/,
    },
    {
      fields: { reason: "Server=tcp:x;Password=abc def;" },
      secret: /abc|def/,
      kept: /Server=tcp:x;Password=\[redacted\];/,
    },
    {
      fields: { reason: "postgres://app:p@ss@db/x" },
      secret: /p@ss|ss@/,
      kept: /postgres:\/\/app:\[redacted\]@db\/x/,
    },
    {
      fields: {
        error: 'login failed: Server=tcp:x.database.windows.net;User Id=app;Password="Pa;ss word1";',
      },
      secret: /Pa;|ss word1/,
      kept: /User Id=app;Password=\[redacted\];/,
    },
    {
      fields: { error: "login failed: Server=tcp:x;Password={Pa;ssword1};" },
      secret: /Pa;|ssword1/,
      kept: /Password=\[redacted\];/,
    },
    {
      fields: { error: "Pwd='it''s;secret'; Database=x" },
      secret: /it|secret/,
      kept: /Pwd=\[redacted\]; Database=x/,
    },
    {
      fields: { error: new Error('connect postgres://app:s3cr"et@db/x') },
      secret: /s3cr/,
      kept: /"name":"Error"/,
    },
    {
      fields: { nested: { deeper: ["Password=hunter2"] } },
      secret: /hunter2/,
      kept: /Password=\[redacted\]/,
    },
  ];
  for (const { fields, secret, kept } of cases) {
    it(`masks ${JSON.stringify(fields instanceof Error ? fields.message : fields)}, the line valid JSON`, () => {
      const raw: string[] = [];
      const logger = createLogger({ write: (line) => raw.push(line) });
      logger.error("connect failed", fields);
      assert.equal(raw.length, 1);
      const parsed = JSON.parse(raw[0]!) as Record<string, unknown>;
      assert.equal(parsed.msg, "connect failed");
      assert.doesNotMatch(raw[0]!, secret);
      assert.match(raw[0]!, kept);
    });
  }

  it("masks a child's fields and the message text too", () => {
    const raw: string[] = [];
    const logger = createLogger({ write: (line) => raw.push(line) }).child({ url: "postgres://a:pw1@h/x" });
    logger.warn("retrying postgres://a:pw2@h/x");
    const parsed = JSON.parse(raw[0]!) as Record<string, unknown>;
    assert.equal(parsed.url, "postgres://a:[redacted]@h/x");
    assert.equal(parsed.msg, "retrying postgres://a:[redacted]@h/x");
  });
});
