import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, resolve } from "node:path";

const root = resolve(import.meta.dirname, "../..");

/** The top-level objects the console span exporter printed (util.inspect blocks from "{" to "}"). */
function printedSpans(stdout: string): string[] {
  return [...stdout.matchAll(/^\{\n[\s\S]*?\n\}$/gm)].map((m) => m[0]).filter((b) => /^ {2}name: '/m.test(b));
}

function attribute(span: string, name: string): string | undefined {
  return new RegExp(`'${name.replace(/\./g, "\\.")}': '([^']*)'`).exec(span)?.[1];
}

describe("telemetry: npm run demo with OTEL_TRACES_EXPORTER=console", function () {
  this.timeout(180_000);

  it("prints the workers' spans, with complete and dead_letter dispositions and a retry, and still ends with RESULT", async () => {
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith("OTEL_") && !k.startsWith("SBINBOX_")),
    );
    const { code, stdout, stderr } = await new Promise<{
      code: number | null;
      stdout: string;
      stderr: string;
    }>((done) => {
      execFile(
        "npm",
        ["run", "--silent", "demo", "--", "--count", "10", "--timeout", "120"],
        {
          cwd: root,
          // The Node running the tests runs the demo too (npm's scripts take `node` from PATH).
          env: {
            ...env,
            PATH: `${dirname(process.execPath)}:${env.PATH ?? ""}`,
            OTEL_TRACES_EXPORTER: "console",
          },
          maxBuffer: 64 * 1024 * 1024,
          timeout: 170_000,
        },
        (error, out, err) =>
          done({
            code: error ? (typeof error.code === "number" ? error.code : null) : 0,
            stdout: out,
            stderr: err,
          }),
      );
    });
    assert.equal(code, 0, stderr.slice(-2000));
    const lines = stdout.trimEnd().split("\n");
    assert.match(
      lines.at(-1) ?? "",
      /^RESULT distinct=10 .* lost=0 doubled=0 upstream=18 upstream_effects=18 upstream_rolled_back=2 rolled_back_effects=0 upstream_dropped_by_broker=\d+$/,
    );

    const spans = printedSpans(stdout);
    const processSpans = spans.filter((s) => /^ {2}name: 'process sbinbox',?$/m.test(s));
    const byDisposition = new Map<string, string[]>();
    for (const span of processSpans) {
      const disposition = attribute(span, "messaging.servicebus.disposition_status") ?? "none";
      byDisposition.set(disposition, [...(byDisposition.get(disposition) ?? []), span]);
    }
    for (const disposition of ["complete", "dead_letter"]) {
      assert.ok(byDisposition.has(disposition), `a process span with disposition ${disposition}`);
      assert.ok(
        spans.some((s) => new RegExp(`^ {2}name: '${disposition} sbinbox',?$`, "m").test(s)),
        `a ${disposition} settlement span`,
      );
    }
    for (const span of byDisposition.get("dead_letter")!)
      assert.equal(attribute(span, "sbinbox.outcome"), "poison");
    // The demo's failOnce event fails once and is retried in place: no abandon, its span ends on attempt 2.
    assert.ok(!byDisposition.has("abandon"), "nothing abandoned");
    assert.ok(
      processSpans.some((s) => /'sbinbox\.attempt': 2\b/.test(s) && /sbinbox\.retry\.waited/.test(s)),
      "a process span that waited and ended on attempt 2",
    );
    assert.ok(
      byDisposition
        .get("complete")!
        .every((s) => ["committed", "duplicate"].includes(attribute(s, "sbinbox.outcome") ?? "")),
    );
    assert.ok(processSpans.every((s) => attribute(s, "messaging.system") === "servicebus"));
  });
});
